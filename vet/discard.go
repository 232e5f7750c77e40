package vet

import (
	"fmt"
	"go/ast"

	"golang.org/x/tools/go/analysis"
)

// checkDiscarded reports a discarded error of Do, TryDo, Acquire,
// TryAcquire, Lead or Release, and a discarded lease of Acquire or TryAcquire
// (rules 3 and 1): as an expression statement, in a go statement, in a
// defer (Release excepted), or assigned to the blank identifier. stack
// ends with m.call.
func checkDiscarded(pass *analysis.Pass, m method, stack []ast.Node) {
	if m.name == "Fence" || m.name == "Number" {
		return
	}
	acquire := m.name == "Acquire" || m.name == "TryAcquire"
	name := m.displayName()
	report := func(format string, args ...any) {
		pass.Report(analysis.Diagnostic{Pos: m.call.Pos(), End: m.call.End(), Message: fmt.Sprintf(format, args...)})
	}
	parent, _ := parentOf(stack[:len(stack)-1])
	switch p := parent.(type) {
	case *ast.ExprStmt, *ast.GoStmt:
		if acquire {
			report("the result of %s is discarded: the lease is never released, and the error is not checked", name)
		} else {
			report("the error of %s is discarded", name)
		}
	case *ast.DeferStmt:
		// defer lease.Release(ctx) is the accepted idiom: the lease ends
		// with the function either way, and Do releases the same way.
		if m.name == "Release" {
			return
		}
		if acquire {
			report("the result of deferred %s is discarded: the lease is never released", name)
		} else {
			report("the error of deferred %s is discarded", name)
		}
	case *ast.AssignStmt:
		checkBlank(m, p.Lhs, p.Rhs, report)
	case *ast.ValueSpec:
		lhs := make([]ast.Expr, len(p.Names))
		for i, id := range p.Names {
			lhs[i] = id
		}
		checkBlank(m, lhs, p.Values, report)
	}
}

// checkBlank reports the results of m.call that go to the blank identifier.
func checkBlank(m method, lhs, rhs []ast.Expr, report func(string, ...any)) {
	name := m.displayName()
	if m.name == "Acquire" || m.name == "TryAcquire" {
		if len(rhs) != 1 || len(lhs) != 2 || ast.Unparen(rhs[0]) != m.call {
			return
		}
		// A blank lease is checked by checkLeaks, along the paths on which
		// the call may have succeeded.
		if isBlank(lhs[1]) {
			report("the error of %s is discarded: a failed acquisition returns a nil lease", name)
		}
		return
	}
	if len(lhs) != len(rhs) {
		return
	}
	for i, r := range rhs {
		if ast.Unparen(r) == m.call && isBlank(lhs[i]) {
			report("the error of %s is assigned to _", name)
		}
	}
}

func isBlank(e ast.Expr) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	return ok && id.Name == "_"
}
