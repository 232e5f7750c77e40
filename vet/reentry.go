package vet

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
)

// checkReentry reports a Do, TryDo, Acquire or TryAcquire inside the fn
// literal of Do or TryDo on the lock of the enclosing call: locks are not
// re-entrant (docs/semantics.md), so the inner call waits for the lock
// that fn itself holds and gives up as "held by another owner". The two
// locks are the same where the analysis can tell: receiver expressions
// written alike, whose every name refers to the same object, none of them
// assigned inside fn, and whose only calls build a lock (locks.Job(id)):
// a generated lock constructor given the same arguments builds the same
// key. Receivers that differ in text (l and locks.Job(id)) are not
// compared.
func checkReentry(pass *analysis.Pass, m method, fn *ast.FuncLit) {
	info := pass.TypesInfo
	if m.recv == nil || !stableIn(info, m.recv, fn) {
		return
	}
	outer := types.ExprString(m.recv)
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		inner := lockkitCall(info, call)
		switch inner.name {
		case "Do", "TryDo", "Acquire", "TryAcquire":
		default:
			return true
		}
		if inner.recv == nil || types.ExprString(inner.recv) != outer || !sameObjects(info, m.recv, inner.recv) {
			return true
		}
		if !types.Identical(info.TypeOf(m.recv), info.TypeOf(inner.recv)) {
			return true
		}
		pass.Report(analysis.Diagnostic{
			Pos:     call.Pos(),
			End:     call.End(),
			Message: fmt.Sprintf("nested %s on the lock of the enclosing %s: locks are not re-entrant, so it waits for the lock this fn holds and reports it held by another owner", inner.displayName(), m.name),
		})
		return true
	})
}

// stableIn reports whether e names the same value everywhere inside fn:
// none of its variables is assigned in fn, and it calls nothing but
// calls that build a lock.
func stableIn(info *types.Info, e ast.Expr, fn *ast.FuncLit) bool {
	vars := map[*types.Var]bool{}
	stable := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if v, ok := info.Uses[n].(*types.Var); ok {
				vars[v] = true
			}
		case *ast.CallExpr:
			// Only calls that build a lock (locks.Job(id)): a call giving
			// anything else (rand.Int(), next()) may differ each time.
			if t := info.TypeOf(n); t == nil || !isLockType(t) {
				stable = false
			}
		}
		return stable
	})
	if !stable {
		return false
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if v := localVar(info, l); v != nil && vars[v] {
					stable = false
				}
			}
		case *ast.IncDecStmt:
			if v := localVar(info, n.X); v != nil && vars[v] {
				stable = false
			}
		case *ast.UnaryExpr:
			if v := localVar(info, n.X); v != nil && vars[v] && n.Op.String() == "&" {
				stable = false
			}
		}
		return stable
	})
	return stable
}

// sameObjects reports whether a and b, written alike, name the same
// objects in the same order.
func sameObjects(info *types.Info, a, b ast.Expr) bool {
	objs := func(e ast.Expr) []types.Object {
		var out []types.Object
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				out = append(out, info.ObjectOf(id))
			}
			return true
		})
		return out
	}
	oa, ob := objs(a), objs(b)
	if len(oa) != len(ob) {
		return false
	}
	for i := range oa {
		if oa[i] != ob[i] {
			return false
		}
	}
	return true
}

// isLockType reports whether t is lockkit's Lock or a type with its Do
// method (a generated wrapper).
func isLockType(t types.Type) bool {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, "Do")
	f, ok := obj.(*types.Func)
	return ok && f.Pkg() != nil && f.Pkg().Path() == lockkitPath
}
