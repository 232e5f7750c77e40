package vet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/cfg"
	"golang.org/x/tools/go/types/typeutil"
)

// acquisition is one `lease, err := l.Acquire(ctx)` (or TryAcquire) whose
// lease this function alone can release.
type acquisition struct {
	m     method
	stmt  ast.Node   // the AssignStmt or ValueSpec: a node of the CFG
	lease *types.Var // the variable holding the lease; nil when blank
	err   *types.Var // the error beside it; nil when discarded
	blank bool       // the lease goes to _: nothing can release it
}

// checkLeaks reports leases from Acquire and TryAcquire that some path from
// the acquisition to a return leaves unreleased (rule 1). Like vet's
// lostcancel, it searches the function's control-flow graph for a path
// that never hands the lease on.
func checkLeaks(pass *analysis.Pass, f *funcInfo) {
	for _, a := range f.acquisitions(pass.TypesInfo) {
		lost := f.leakPath(pass.TypesInfo, a)
		if lost == nil {
			continue
		}
		var where string
		switch lost := lost.(type) {
		case *ast.ReturnStmt:
			if lost.Return >= f.body.Rbrace {
				where = fmt.Sprintf("the end of the function (line %d)", line(pass, f.body.Rbrace))
			} else {
				where = fmt.Sprintf("the return at line %d", line(pass, lost.Pos()))
			}
		default:
			where = fmt.Sprintf("the next acquisition at line %d", line(pass, lost.Pos()))
			if !a.blank && lost != a.stmt {
				where = fmt.Sprintf("the assignment to %s at line %d", a.lease.Name(), line(pass, lost.Pos()))
			}
		}
		msg := fmt.Sprintf("the lease from %s is not released on every path: %s can be reached without %s.Release (the lease stays held, and renewed, until the client closes)", a.m.displayName(), where, a.leaseName())
		if a.blank {
			msg = fmt.Sprintf("the lease from %s is discarded: if the call succeeds, nothing releases it before %s (the lease stays held, and renewed, until the client closes)", a.m.displayName(), where)
		}
		pass.Report(analysis.Diagnostic{
			Pos:     a.m.call.Pos(),
			End:     a.m.call.End(),
			Message: msg,
			Related: []analysis.RelatedInformation{{Pos: lost.Pos(), Message: "the lease is lost here"}},
		})
	}
}

// acquisitions finds the Acquire and TryAcquire calls of this function whose
// lease goes to a variable of the function.
func (f *funcInfo) acquisitions(info *types.Info) []acquisition {
	var out []acquisition
	inspectOwn(f.body, func(n ast.Node, stack []ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		m := lockkitCall(info, call)
		if m.name != "Acquire" && m.name != "TryAcquire" {
			return true
		}
		parent, _ := parentOf(stack)
		var lhs []ast.Expr
		switch p := parent.(type) {
		case *ast.AssignStmt:
			if len(p.Rhs) == 1 {
				lhs = p.Lhs
			}
		case *ast.ValueSpec:
			if len(p.Values) == 1 {
				for _, id := range p.Names {
					lhs = append(lhs, id)
				}
			}
		}
		if len(lhs) != 2 {
			return true // returned, passed on, or discarded (checkDiscarded)
		}
		a := acquisition{m: m, stmt: parent, err: localVar(info, lhs[1])}
		if isBlank(lhs[0]) {
			a.blank = true
		} else if a.lease = localVar(info, lhs[0]); a.lease == nil || !f.owns(a.lease) {
			return true // stored in a field, or in a variable that outlives this function
		}
		if a.err != nil && a.err.Name() == "_" {
			a.err = nil
		}
		out = append(out, a)
		return true
	})
	return out
}

func (a acquisition) leaseName() string {
	if a.lease == nil {
		return "lease"
	}
	return a.lease.Name()
}

// leaseUse is what one node does with a lease.
type leaseUse int

const (
	useNone      leaseUse = iota
	useRead               // lease.Fence(), lease != nil: the lease stays here
	useOverwrite          // the variable gets a new value while the lease is held
	useHandled            // released, returned, stored, passed on or captured
)

// classify tells what node n (a node of the CFG) does with the lease in v.
// Only Release, and handing the lease to code that may release it, end
// this function's duty; reading its fence or token does not.
func classify(info *types.Info, n ast.Node, v *types.Var, namedResult bool, rc releasers) leaseUse {
	use := useNone
	note := func(u leaseUse) {
		if u > use {
			use = u
		}
	}
	if ret, ok := n.(*ast.ReturnStmt); ok && ret.Results == nil && namedResult {
		return useHandled // a naked return returns the named result
	}
	ast.PreorderStack(n, nil, func(n ast.Node, stack []ast.Node) bool {
		if lit, ok := n.(*ast.FuncLit); ok {
			switch {
			case rc.lits[lit]:
				note(useRead) // a local closure: its calls are where it may release
			case refersTo(info, lit, v) || rc.calledIn(info, lit):
				note(useHandled) // captured: a deferred or spawned closure may release it
			}
			return false
		}
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		if cv, ok := info.Uses[id].(*types.Var); ok && rc.vars[cv] {
			note(useHandled) // the closure called, deferred or handed on
			return true
		}
		if info.Defs[id] == v && v != nil {
			note(useOverwrite)
			return true
		}
		if info.Uses[id] != v || v == nil {
			return true
		}
		parent, i := parentOf(stack)
		switch p := parent.(type) {
		case nil:
			note(useRead) // the node is the identifier: a switch tag, say
		case *ast.SelectorExpr:
			if p.Sel.Name == "Release" {
				note(useHandled)
			} else {
				note(useRead)
			}
		case *ast.BinaryExpr:
			if isNilCompare(p) {
				note(useRead)
			} else {
				note(useHandled)
			}
		case *ast.AssignStmt:
			switch {
			case inList(p.Lhs, stack, i, id):
				note(useOverwrite)
			case blankTarget(p, stack, i, id):
				note(useRead) // _ = lease keeps the compiler quiet and releases nothing
			default:
				note(useHandled)
			}
		case *ast.CallExpr:
			if argOf(p, stack, i, id) && formatsOnly(info, p) {
				note(useRead) // logged or formatted: nobody releases it there
			} else {
				note(useHandled)
			}
		default:
			note(useHandled)
		}
		return true
	})
	return use
}

// blankTarget reports whether id (reached through stack[i+1:]) is a right-hand
// side of the assignment a whose left-hand side is _.
func blankTarget(a *ast.AssignStmt, stack []ast.Node, i int, id *ast.Ident) bool {
	if len(a.Lhs) != len(a.Rhs) {
		return false
	}
	var child ast.Node = id
	if i+1 < len(stack) {
		child = stack[i+1]
	}
	for j, r := range a.Rhs {
		if r == child {
			return isBlank(a.Lhs[j])
		}
	}
	return false
}

// inList reports whether id (reached through stack[i+1:]) is one of list.
func inList(list []ast.Expr, stack []ast.Node, i int, id *ast.Ident) bool {
	var child ast.Node = id
	if i+1 < len(stack) {
		child = stack[i+1]
	}
	for _, e := range list {
		if e == child {
			return true
		}
	}
	return false
}

// leakPath searches the CFG from the acquisition for a path on which the
// lease is neither released nor handed on before the function returns or
// the variable is overwritten. It returns the return statement or the
// overwriting node, or nil when every path handles the lease.
//
// Paths on which the lease is nil are not followed: the branch where the
// error of the same call is non-nil (err != nil, errors.Is(err, ...)), or
// the lease itself is nil, until err is assigned again.
func (f *funcInfo) leakPath(info *types.Info, a acquisition) ast.Node {
	defBlock, defIdx := f.find(a.stmt)
	if defBlock == nil {
		return nil
	}
	namedResult := a.lease != nil && f.isNamedResult(a.lease)
	taggedCases := taggedSwitchCases(f.body)
	var rc releasers
	if a.lease != nil {
		rc = localReleasers(info, f.body, a.lease)
	}

	type state struct {
		b          *cfg.Block
		correlated bool // err still holds the acquisition's error
	}
	seen := map[state]bool{}
	var search func(s state, from int) ast.Node
	search = func(s state, from int) ast.Node {
		b := s.b
		for _, n := range b.Nodes[from:] {
			if n == a.stmt {
				return n // acquired again before the old lease was released
			}
			if failsTest(info, n) {
				return nil // the leak is the least of a failed test's problems
			}
			if a.blank {
				// nothing can release it
			} else if use := classify(info, n, a.lease, namedResult, rc); use == useHandled {
				return nil
			} else if use == useOverwrite {
				return n
			}
			if s.correlated && a.err != nil && assigns(info, n, a.err) {
				s.correlated = false
			}
		}
		if ret := b.Return(); ret != nil {
			return ret
		}
		succs := b.Succs
		if len(succs) == 2 && len(b.Nodes) > 0 {
			if cond, ok := b.Nodes[len(b.Nodes)-1].(ast.Expr); ok {
				if tag, ok := taggedCases[cond]; ok {
					// In switch tag { case x: }, the condition is tag == x.
					cond = &ast.BinaryExpr{X: tag, OpPos: cond.Pos(), Op: token.EQL, Y: cond}
				}
				switch nilBranch(info, cond, a, s.correlated) {
				case 0:
					succs = succs[1:]
				case 1:
					succs = succs[:1]
				}
			}
		}
		for _, next := range succs {
			ns := state{next, s.correlated}
			if seen[ns] {
				continue
			}
			seen[ns] = true
			if lost := search(ns, 0); lost != nil {
				return lost
			}
		}
		return nil
	}
	return search(state{defBlock, a.err != nil}, defIdx+1)
}

// assigns reports whether node n may give v a new value.
func assigns(info *types.Info, n ast.Node, v *types.Var) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if localVar(info, l) == v {
					found = true
				}
			}
		case *ast.UnaryExpr:
			if n.Op == token.AND && localVar(info, n.X) == v {
				found = true // &err: anything may write it
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				if info.Defs[id] == v {
					found = true
				}
			}
		case *ast.FuncLit:
			if refersTo(info, n, v) {
				found = true
			}
			return false
		}
		return !found
	})
	return found
}

// nilBranch tells on which successor of a conditional block the lease is
// known to be nil: 0 when the condition is true, 1 when it is false, -1
// when neither.
func nilBranch(info *types.Info, cond ast.Expr, a acquisition, errKnown bool) int {
	switch c := ast.Unparen(cond).(type) {
	case *ast.UnaryExpr:
		if c.Op == token.NOT {
			if b := nilBranch(info, c.X, a, errKnown); b >= 0 {
				return 1 - b
			}
		}
	case *ast.BinaryExpr:
		switch c.Op {
		case token.LAND: // true only if both are: nil when either is nil when true
			if nilBranch(info, c.X, a, errKnown) == 0 || nilBranch(info, c.Y, a, errKnown) == 0 {
				return 0
			}
		case token.LOR: // false only if both are
			if nilBranch(info, c.X, a, errKnown) == 1 || nilBranch(info, c.Y, a, errKnown) == 1 {
				return 1
			}
		case token.EQL, token.NEQ:
			x, y := c.X, c.Y
			if isNil(info, x) || isSentinel(info, x) {
				x, y = y, x
			}
			v := localVar(info, x)
			eq := c.Op == token.EQL
			if isSentinel(info, y) {
				// err == lockkit.ErrNotAcquired holds only for a non-nil err.
				switch {
				case v == nil || v != a.err || !errKnown:
				case eq:
					return 0
				default:
					return 1
				}
				return -1
			}
			if !isNil(info, y) {
				return -1
			}
			switch {
			case v == nil:
			case v == a.lease && eq, v == a.err && errKnown && !eq:
				return 0
			case v == a.lease && !eq, v == a.err && errKnown && eq:
				return 1
			}
		}
	case *ast.CallExpr:
		// errors.Is(err, target) and errors.As(err, &target) are true only
		// for a non-nil err (a nil target aside).
		fn, _ := typeutil.Callee(info, c).(*types.Func)
		if errKnown && a.err != nil && fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == "errors" &&
			(fn.Name() == "Is" || fn.Name() == "As") && len(c.Args) == 2 &&
			localVar(info, c.Args[0]) == a.err && !isNil(info, c.Args[1]) {
			return 0
		}
	}
	return -1
}

func isNil(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[ast.Unparen(e)]
	return ok && tv.IsNil()
}

// isSentinel reports whether e names a package-level error variable, such
// as lockkit.ErrNotAcquired: an error that is never nil.
func isSentinel(info *types.Info, e ast.Expr) bool {
	var id *ast.Ident
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return false
	}
	v, ok := info.Uses[id].(*types.Var)
	if !ok || v.Pkg() == nil || v.Parent() != v.Pkg().Scope() {
		return false
	}
	return types.Identical(v.Type(), errorType)
}

var errorType = types.Universe.Lookup("error").Type()

// taggedSwitchCases maps the case expressions of switch statements with a
// tag to that tag: in the CFG they stand as conditions, but mean
// tag == expr.
func taggedSwitchCases(body *ast.BlockStmt) map[ast.Expr]ast.Expr {
	m := map[ast.Expr]ast.Expr{}
	ast.Inspect(body, func(n ast.Node) bool {
		if s, ok := n.(*ast.SwitchStmt); ok && s.Tag != nil {
			for _, c := range s.Body.List {
				if cc, ok := c.(*ast.CaseClause); ok {
					for _, e := range cc.List {
						m[e] = s.Tag
					}
				}
			}
		}
		return true
	})
	return m
}

// failsTest reports whether n is a statement like t.Errorf(...) that marks
// a test (or benchmark, or fuzz test) failed or skipped: a lease left held
// on such a path is not reported. t.Fatal and friends never return, and
// ctrlflow already ends their paths.
func failsTest(info *types.Info, n ast.Node) bool {
	es, ok := n.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := ast.Unparen(es.X).(*ast.CallExpr)
	if !ok {
		return false
	}
	fn, _ := typeutil.Callee(info, call).(*types.Func)
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != "testing" {
		return false
	}
	switch fn.Name() {
	case "Error", "Errorf", "Fail", "FailNow", "Fatal", "Fatalf", "Skip", "Skipf", "SkipNow":
		return true
	}
	return false
}

// releasers are the local closures that capture a lease: variables of the
// function whose one value is a function literal referring to the lease
// (release := func() error { return lease.Release(ctx) }). The lease is
// handed on where such a variable is used (called, deferred, passed,
// stored), not where the literal is written, so a path that never calls it
// leaks the lease.
type releasers struct {
	vars map[*types.Var]bool
	lits map[*ast.FuncLit]bool
}

func localReleasers(info *types.Info, body *ast.BlockStmt, lease *types.Var) releasers {
	rc := releasers{vars: map[*types.Var]bool{}, lits: map[*ast.FuncLit]bool{}}
	assigned := map[*types.Var]int{}
	litVar := map[*ast.FuncLit]*types.Var{}
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok {
			return true
		}
		for i, lhs := range as.Lhs {
			id, ok := lhs.(*ast.Ident)
			if !ok {
				continue
			}
			v, _ := info.Defs[id].(*types.Var)
			if v == nil {
				v, _ = info.Uses[id].(*types.Var)
			}
			if v == nil {
				continue
			}
			assigned[v]++
			if as.Tok != token.DEFINE || len(as.Lhs) != len(as.Rhs) {
				continue
			}
			if lit, ok := as.Rhs[i].(*ast.FuncLit); ok && refersTo(info, lit, lease) {
				litVar[lit] = v
			}
		}
		return true
	})
	for lit, v := range litVar {
		if assigned[v] == 1 { // given another value somewhere: not followed
			rc.vars[v], rc.lits[lit] = true, true
		}
	}
	return rc
}

// calledIn reports whether n refers to one of the closures.
func (rc releasers) calledIn(info *types.Info, n ast.Node) bool {
	for v := range rc.vars {
		if refersTo(info, n, v) {
			return true
		}
	}
	return false
}
