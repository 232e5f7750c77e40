package vet

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// checkContexts reports calls inside the fn literal of Do, TryDo or Lead
// that pass a context not derived from fn's own ctx parameter (rule 2): only
// that ctx is cancelled, with cause ErrLockLost, when the lease (the term)
// is lost. A nested Do's or Lead's fn is checked on its own.
func checkContexts(pass *analysis.Pass, m method, fn *ast.FuncLit) {
	info := pass.TypesInfo
	ctxObj := firstParam(info, fn)
	good, replaced := derivedContexts(info, fn, ctxObj)
	for _, r := range replaced {
		pass.Report(analysis.Diagnostic{
			Pos:     r.Pos(),
			End:     r.End(),
			Message: fmt.Sprintf("%s replaces the ctx of the fn of %s with a context not derived from it: that one is not cancelled when the lease is lost", types.ExprString(r), m.displayName()),
		})
	}

	nested := map[*ast.FuncLit]bool{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return !nested[n]
		case *ast.CallExpr:
			if inner := lockkitCall(info, n); inner.name == "Do" || inner.name == "TryDo" || inner.name == "Lead" {
				if lit := inner.fnLit(); lit != nil {
					nested[lit] = true
				}
			}
			if sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr); ok && (sel.Sel.Name == "Done" || sel.Sel.Name == "Err") {
				if t := info.TypeOf(sel.X); t != nil && isContextType(t) && !mentions(info, sel.X, good) {
					pass.Report(analysis.Diagnostic{
						Pos:     n.Pos(),
						End:     n.End(),
						Message: fmt.Sprintf("%s.%s is read inside the fn of %s: read fn's ctx, which is cancelled when the lease is lost", types.ExprString(sel.X), sel.Sel.Name, m.displayName()),
					})
				}
			}
			for _, arg := range contextArgs(info, n) {
				if mentions(info, arg, good) || passesContext(info, arg) {
					continue
				}
				d := analysis.Diagnostic{
					Pos:     arg.Pos(),
					End:     arg.End(),
					Message: fmt.Sprintf("%s is passed inside the fn of %s: pass fn's ctx, which is cancelled when the lease is lost", types.ExprString(arg), m.displayName()),
				}
				if ctxObj != nil && replaceable(info, arg, fn) && resolves(pass, arg, ctxObj) {
					d.Message = fmt.Sprintf("%s is passed inside the fn of %s: pass fn's %s, which is cancelled when the lease is lost", types.ExprString(arg), m.displayName(), ctxObj.Name())
					d.SuggestedFixes = []analysis.SuggestedFix{{
						Message:   "Pass " + ctxObj.Name(),
						TextEdits: []analysis.TextEdit{{Pos: arg.Pos(), End: arg.End(), NewText: []byte(ctxObj.Name())}},
					}}
				}
				pass.Report(d)
			}
		}
		return true
	})
}

// firstParam returns fn's first parameter, or nil when it has no name.
func firstParam(info *types.Info, fn *ast.FuncLit) *types.Var {
	ps := fn.Type.Params
	if ps == nil || len(ps.List) == 0 || len(ps.List[0].Names) == 0 {
		return nil
	}
	v, _ := info.Defs[ps.List[0].Names[0]].(*types.Var)
	if v == nil || v.Name() == "_" {
		return nil
	}
	return v
}

// derivedContexts returns the context variables derived from ctx: ctx, and
// each context variable declared in fn whose every assignment mentions
// one of them (context.WithTimeout(ctx, d), tracer.Start(ctx, name), ...).
// It also returns the assignments that give ctx itself a value not derived
// from it.
func derivedContexts(info *types.Info, fn *ast.FuncLit, ctx *types.Var) (good map[*types.Var]bool, replaced []ast.Expr) {
	good = map[*types.Var]bool{}
	if ctx != nil {
		good[ctx] = true
	}
	values := map[*types.Var][]ast.Expr{}
	record := func(lhs, rhs []ast.Expr) {
		for i, l := range lhs {
			v := localVar(info, l)
			if v == nil || !isContextType(v.Type()) {
				continue
			}
			r := rhs[0]
			if len(lhs) == len(rhs) {
				r = rhs[i]
			}
			switch {
			case v == ctx:
				if !mentions(info, r, good) {
					replaced = append(replaced, r)
				}
			case fn.Body.Pos() <= v.Pos() && v.Pos() < fn.Body.End():
				values[v] = append(values[v], r)
			}
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Rhs) > 0 {
				record(n.Lhs, n.Rhs)
			}
		case *ast.ValueSpec:
			if len(n.Values) > 0 {
				lhs := make([]ast.Expr, len(n.Names))
				for i, id := range n.Names {
					lhs[i] = id
				}
				record(lhs, n.Values)
			}
		}
		return true
	})
	// A function literal of fn called with contexts: each context parameter
	// takes the values of its arguments, as if assigned (step := func(ctx
	// context.Context) {...}; step(lctx)). A literal never called here, or
	// used otherwise, keeps parameters of unknown value.
	for param, args := range closureArgs(info, fn.Body) {
		values[param] = append(values[param], args...)
	}
	for v := range values {
		good[v] = true
	}
	for changed := true; changed; {
		changed = false
		for v, rs := range values {
			if !good[v] {
				continue
			}
			for _, r := range rs {
				if !mentions(info, r, good) {
					delete(good, v)
					changed = true
					break
				}
			}
		}
	}
	return good, replaced
}

// closureArgs maps each context parameter of a function literal in body,
// bound to a variable (f := func(...)) or called where it stands, to the
// arguments of its calls in body. A literal bound to a variable that is
// also used otherwise than called (passed on, stored) is left out: its
// other callers are unknown.
func closureArgs(info *types.Info, body *ast.BlockStmt) map[*types.Var][]ast.Expr {
	lits := map[*types.Var]*ast.FuncLit{}
	ast.Inspect(body, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, r := range a.Rhs {
				if lit, ok := ast.Unparen(r).(*ast.FuncLit); ok {
					if v := localVar(info, a.Lhs[i]); v != nil {
						lits[v] = lit
					}
				}
			}
		}
		return true
	})
	calls := map[*ast.FuncLit][]*ast.CallExpr{}
	escaped := map[*ast.FuncLit]bool{}
	ast.PreorderStack(body, nil, func(n ast.Node, stack []ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if lit, ok := ast.Unparen(n.Fun).(*ast.FuncLit); ok {
				calls[lit] = append(calls[lit], n)
			}
		case *ast.Ident:
			v, _ := info.Uses[n].(*types.Var)
			lit := lits[v]
			if lit == nil {
				return true
			}
			if p, _ := parentOf(stack); p != nil {
				if c, ok := p.(*ast.CallExpr); ok && ast.Unparen(c.Fun) == n {
					calls[lit] = append(calls[lit], c)
					return true
				}
			}
			escaped[lit] = true
		}
		return true
	})
	out := map[*types.Var][]ast.Expr{}
	for lit, cs := range calls {
		if escaped[lit] {
			continue
		}
		var params []*types.Var
		for _, f := range lit.Type.Params.List {
			for _, id := range f.Names {
				v, _ := info.Defs[id].(*types.Var)
				params = append(params, v)
			}
		}
		for i, p := range params {
			if p == nil || !isContextType(p.Type()) {
				continue
			}
			for _, c := range cs {
				if i < len(c.Args) && !c.Ellipsis.IsValid() {
					out[p] = append(out[p], c.Args[i])
				}
			}
		}
	}
	return out
}

// contextArgs returns the arguments of call whose parameter is a
// context.Context.
func contextArgs(info *types.Info, call *ast.CallExpr) []ast.Expr {
	tv, ok := info.Types[call.Fun]
	if !ok || tv.IsType() || tv.Type == nil {
		return nil
	}
	sig, ok := tv.Type.Underlying().(*types.Signature)
	if !ok {
		return nil
	}
	params := sig.Params()
	var out []ast.Expr
	for i, arg := range call.Args {
		var pt types.Type
		switch {
		case sig.Variadic() && i >= params.Len()-1:
			if call.Ellipsis.IsValid() {
				continue
			}
			if s, ok := params.At(params.Len() - 1).Type().Underlying().(*types.Slice); ok {
				pt = s.Elem()
			}
		case i < params.Len():
			pt = params.At(i).Type()
		}
		if pt == nil || !isContextType(pt) {
			continue
		}
		if _, tuple := info.TypeOf(arg).(*types.Tuple); tuple {
			continue // f(g()): g's results
		}
		out = append(out, arg)
	}
	return out
}

// mentions reports whether e refers to one of vars.
func mentions(info *types.Info, e ast.Expr, vars map[*types.Var]bool) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			if v, ok := info.Uses[id].(*types.Var); ok && vars[v] {
				found = true
			}
		}
		return !found
	})
	return found
}

// passesContext reports whether e is a call that itself takes a context
// argument: that argument is checked, not e.
func passesContext(info *types.Info, e ast.Expr) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return false
	}
	for _, a := range call.Args {
		if t := info.TypeOf(a); t != nil && isContextType(t) {
			return true
		}
	}
	return false
}

// resolves reports whether the name of v, written where e is, refers to v:
// the fix must not pick up a shadowing variable.
func resolves(pass *analysis.Pass, e ast.Expr, v *types.Var) bool {
	s := pass.Pkg.Scope().Innermost(e.Pos())
	if s == nil {
		return false
	}
	_, obj := s.LookupParent(v.Name(), e.Pos())
	return obj == v
}

// replaceable reports whether fn's ctx can simply stand in for arg: a
// context from outside fn, context.Background(), context.TODO() or nil. A
// context variable of fn's own is not: its value is made in fn (with a
// timeout, say), and the report on that assignment's call is the one to
// fix.
func replaceable(info *types.Info, arg ast.Expr, fn *ast.FuncLit) bool {
	arg = ast.Unparen(arg)
	if isNil(info, arg) {
		return true
	}
	if v := localVar(info, arg); v != nil {
		return v.Pos() < fn.Pos() || v.Pos() >= fn.End()
	}
	if call, ok := arg.(*ast.CallExpr); ok && len(call.Args) == 0 {
		if f, ok := typeutil.Callee(info, call).(*types.Func); ok && f.Pkg() != nil && f.Pkg().Path() == "context" {
			return f.Name() == "Background" || f.Name() == "TODO"
		}
	}
	return false
}
