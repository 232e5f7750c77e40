package vet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/cfg"
)

// checkUseAfterRelease reports a lease, or a fence read from it, used on a
// path after the lease's Release (rule 4). A deferred Release, or one in a
// function literal, runs at another time and starts no path here.
func checkUseAfterRelease(pass *analysis.Pass, f *funcInfo) {
	info := pass.TypesInfo
	reported := map[token.Pos]bool{}
	for _, b := range f.g.Blocks {
		for i, n := range b.Nodes {
			switch n.(type) {
			case *ast.DeferStmt, *ast.GoStmt:
				continue
			}
			inspectOwn(n, func(n ast.Node, _ []ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				m := lockkitCall(info, call)
				if m.name != "Release" {
					return true
				}
				v := localVar(info, m.recv)
				if v == nil {
					return true
				}
				r := release{v: v, call: call, fences: fenceVars(info, f.body, v)}
				for _, u := range r.usesAfter(info, b, i) {
					if !reported[u.id.Pos()] {
						reported[u.id.Pos()] = true
						pass.Report(analysis.Diagnostic{
							Pos:     u.id.Pos(),
							End:     u.end,
							Message: u.message(pass, r),
						})
					}
				}
				return true
			})
		}
	}
}

// release is one non-deferred lease.Release(ctx) call.
type release struct {
	v      *types.Var
	call   *ast.CallExpr
	fences map[*types.Var]bool // variables holding v.Fence(), read before the release
}

// lateUse is one use of a released lease or of its fence.
type lateUse struct {
	id      *ast.Ident
	end     token.Pos
	again   bool // a second Release
	isFence bool
}

func (u lateUse) message(pass *analysis.Pass, r release) string {
	at := line(pass, r.call.Pos())
	switch {
	case u.again:
		return fmt.Sprintf("%s is released again: it was released at line %d (the second Release fails with ErrNotHeld)", r.v.Name(), at)
	case u.isFence:
		if u.id.Name == "fence" {
			return fmt.Sprintf("the fence of %s is used after %s.Release at line %d: another holder may have the lock, and a newer fence, by now", r.v.Name(), r.v.Name(), at)
		}
		return fmt.Sprintf("fence %s of %s is used after %s.Release at line %d: another holder may have the lock, and a newer fence, by now", u.id.Name, r.v.Name(), r.v.Name(), at)
	default:
		return fmt.Sprintf("%s is used after %s.Release at line %d: the lease no longer protects anything", r.v.Name(), r.v.Name(), at)
	}
}

// fenceVars returns the variables of body whose only assignment is
// `x := v.Fence()` (or var x = v.Fence()).
func fenceVars(info *types.Info, body *ast.BlockStmt, v *types.Var) map[*types.Var]bool {
	fences := map[*types.Var]bool{}
	others := map[*types.Var]bool{}
	note := func(lhs ast.Expr, rhs ast.Expr, one bool) {
		x := localVar(info, lhs)
		if x == nil {
			return
		}
		if call, ok := ast.Unparen(rhs).(*ast.CallExpr); ok && one {
			if m := lockkitCall(info, call); m.name == "Fence" && localVar(info, m.recv) == v {
				if fences[x] {
					others[x] = true // assigned more than once
				}
				fences[x] = true
				return
			}
		}
		others[x] = true
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if len(n.Lhs) == len(n.Rhs) {
					note(l, n.Rhs[i], true)
				} else {
					note(l, nil, false)
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if len(n.Names) == len(n.Values) {
					note(id, n.Values[i], true)
				} else {
					note(id, nil, false)
				}
			}
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				note(n.X, nil, false)
			}
		}
		return true
	})
	for x := range others {
		delete(fences, x)
	}
	return fences
}

// usesAfter follows every path from the release (node i of block b) and
// returns the first use of the lease or of its fence on each, until the
// variable gets a new value.
func (r release) usesAfter(info *types.Info, b *cfg.Block, i int) []lateUse {
	var uses []lateUse
	seen := map[*cfg.Block]bool{}
	var walk func(b *cfg.Block, from int)
	walk = func(b *cfg.Block, from int) {
		if from == 0 && b.Kind == cfg.KindRangeLoop {
			// Each iteration of a range loop gives its key and value anew.
			if rs, ok := b.Stmt.(*ast.RangeStmt); ok && (localVar(info, rs.Key) == r.v || localVar(info, rs.Value) == r.v) {
				return
			}
		}
		for _, n := range b.Nodes[from:] {
			use, killed := r.scan(info, n)
			if use != nil {
				uses = append(uses, *use)
				return
			}
			if killed {
				return
			}
		}
		for _, next := range b.Succs {
			if !seen[next] {
				seen[next] = true
				walk(next, 0)
			}
		}
	}
	walk(b, i+1)
	return uses
}

// scan looks at one node after the release: the first use of the lease or
// its fence, or whether it gives the lease variable a new value.
func (r release) scan(info *types.Info, n ast.Node) (use *lateUse, killed bool) {
	inspectOwn(n, func(n ast.Node, stack []ast.Node) bool {
		if use != nil {
			return false
		}
		if _, ok := n.(*ast.FuncLit); ok {
			return false // runs at another time
		}
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		if info.Defs[id] == r.v {
			killed = true
			return true
		}
		obj := info.Uses[id]
		if obj == nil || (obj != r.v && !r.fences[asVar(obj)]) {
			return true
		}
		parent, pi := parentOf(stack)
		if a, ok := parent.(*ast.AssignStmt); ok && inList(a.Lhs, stack, pi, id) {
			if obj == r.v {
				killed = true
			}
			return true
		}
		if obj != r.v {
			if call, ok := parent.(*ast.CallExpr); ok && argOf(call, stack, pi, id) && formatsOnly(info, call) {
				return true // quoted in a message or a log line: no write
			}
			use = &lateUse{id: id, end: id.End(), isFence: true}
			return false
		}
		switch p := parent.(type) {
		case *ast.BinaryExpr:
			if isNilCompare(p) {
				return true
			}
		case *ast.SelectorExpr:
			switch p.Sel.Name {
			case "Key", "Token":
				return true // the lock's identity: still true after Release
			case "Release":
				use = &lateUse{id: id, end: p.End(), again: true}
				return false
			}
			use = &lateUse{id: id, end: p.End()}
			return false
		}
		use = &lateUse{id: id, end: id.End()}
		return false
	})
	return use, killed
}

func asVar(obj types.Object) *types.Var {
	v, _ := obj.(*types.Var)
	return v
}
