package vet

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// checkFencing reports the fn literal of a fencing lock's Do or TryDo that
// never reads lease.Fence() (rule 5), and the fn literal of an election's
// Lead that never reads term.Number(): a term's number is its fence, and an
// election always fences. A lock type is fencing when its method set has
// the marker method LockkitFencing() that the generator emits for domains
// with fencing on. Passing the lease or term itself on (to a function, a
// struct, a closure), or the term's Lease(), counts as reading it: the
// callee may.
func checkFencing(pass *analysis.Pass, m method, fn *ast.FuncLit) {
	lead := m.name == "Lead"
	if !lead && (m.recvType == nil || !hasFencingMarker(m.recvType)) {
		return
	}
	info := pass.TypesInfo
	lease := secondParam(info, fn)
	if lease != nil && readsFence(info, fn.Body, lease) || !callsOut(info, fn.Body) {
		return
	}
	msg := fmt.Sprintf("the fn of %s never reads lease.Fence(): this lock's domain has fencing on, so pass the fence to the protected resource's write", m.displayName())
	if lead {
		msg = fmt.Sprintf("the fn of %s never reads term.Number(): a term's number is its fence, so pass it to the protected resource's write, or a deposed leader's late write wins", m.displayName())
	}
	pass.Report(analysis.Diagnostic{Pos: fn.Pos(), End: fn.Type.End(), Message: msg})
}

// hasFencingMarker reports whether t (or *t) has the method
// LockkitFencing() with no parameters and no results.
func hasFencingMarker(t types.Type) bool {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, fencingMarker)
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	sig, ok := fn.Type().(*types.Signature)
	return ok && sig.Params().Len() == 0 && sig.Results().Len() == 0
}

// secondParam returns fn's second parameter, a *Lease or a *Term, or nil
// when it has no name.
func secondParam(info *types.Info, fn *ast.FuncLit) *types.Var {
	if fn.Type.Params == nil {
		return nil
	}
	var names []*ast.Ident
	for _, f := range fn.Type.Params.List {
		names = append(names, f.Names...)
	}
	if len(names) < 2 {
		return nil
	}
	v, _ := info.Defs[names[1]].(*types.Var)
	if v == nil || v.Name() == "_" || !isLeaseType(v.Type()) && !isTermType(v.Type()) {
		return nil
	}
	return v
}

// readsFence reports whether body calls lease.Fence() (term.Number() or
// term.Lease() for a term), or hands the lease or term to code that may (any
// use other than a method call or a nil comparison).
func readsFence(info *types.Info, body *ast.BlockStmt, lease *types.Var) bool {
	found := false
	ast.PreorderStack(body, nil, func(n ast.Node, stack []ast.Node) bool {
		if found {
			return false
		}
		id, ok := n.(*ast.Ident)
		if !ok || info.Uses[id] != lease {
			return true
		}
		switch p, _ := parentOf(stack); p := p.(type) {
		case *ast.SelectorExpr:
			found = p.Sel.Name == "Fence" || isTermType(lease.Type()) && (p.Sel.Name == "Number" || p.Sel.Name == "Lease")
		case *ast.BinaryExpr:
			found = !isNilCompare(p)
		default:
			found = true
		}
		return true
	})
	return found
}

// callsOut reports whether body calls a function: a fn that calls nothing
// (a probe like func(...) error { return nil }) writes to no resource and
// has no use for a fence. Conversions, builtins, the lease's own
// methods and calls that only format or log do not count.
func callsOut(info *types.Info, body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		if tv, ok := info.Types[call.Fun]; ok && (tv.IsType() || tv.IsBuiltin()) {
			return true
		}
		if m := lockkitCall(info, call); m.name == "Fence" || m.name == "Release" || m.name == "Number" {
			return true
		}
		if formatsOnly(info, call) {
			return true
		}
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			if s := info.Selections[sel]; s != nil && (isLeaseType(s.Recv()) || isTermType(s.Recv())) {
				return true // lease.Key(), lease.Err(), term.Err(), ...
			}
		}
		found = true
		return false
	})
	return found
}
