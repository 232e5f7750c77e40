package vet

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/ctrlflow"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// lockkitPath is the import path of the runtime whose types the analyzer
// matches. Only types of this package count: a look-alike Lock or Lease of
// another package is never reported.
const lockkitPath = "github.com/lockkit/lockkit/lockkit"

// fencingMarker is the name of the method that marks a generated lock type
// as a lock of a fencing domain: func (TableLock) LockkitFencing(), no
// parameters and no results. See the package doc.
const fencingMarker = "LockkitFencing"

// Analyzer reports misuse of lockkit locks and leases. The package doc is
// its manual.
var Analyzer = &analysis.Analyzer{
	Name:     "lockkit",
	Doc:      "report misuse of lockkit locks and leases\n\nlockkit reports leases that are not released on every path, calls inside a Do, TryDo or Lead fn that pass a context other than fn's own, discarded errors of Do, TryDo, Acquire, TryAcquire, Lead and Release, leases used after Release, and fns of fencing locks (and of every Lead) that never read the fence.",
	URL:      "https://pkg.go.dev/github.com/lockkit/lockkit/vet",
	Requires: []*analysis.Analyzer{inspect.Analyzer, ctrlflow.Analyzer},
	Run:      run,
}

func run(pass *analysis.Pass) (any, error) {
	if p := pass.Pkg.Path(); p == lockkitPath || p == lockkitPath+"_test" {
		// The runtime implements Release, and its tests and examples break
		// these rules on purpose (double releases, leases left to expire).
		return nil, nil
	}
	pass = withIgnores(pass)
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	cfgs := pass.ResultOf[ctrlflow.Analyzer].(*ctrlflow.CFGs)

	ins.WithStack([]ast.Node{(*ast.CallExpr)(nil)}, func(n ast.Node, push bool, stack []ast.Node) bool {
		if !push {
			return true
		}
		call := n.(*ast.CallExpr)
		m := lockkitCall(pass.TypesInfo, call)
		if m.name == "" {
			return true
		}
		checkDiscarded(pass, m, stack)
		if m.name == "Do" || m.name == "TryDo" {
			if fn := m.fnLit(); fn != nil {
				checkContexts(pass, m, fn)
				checkFencing(pass, m, fn)
				checkReentry(pass, m, fn)
			}
		}
		if m.name == "Lead" {
			// An election's fn runs while leading, as a Do's while
			// holding; its term's number is the fence, always on.
			if fn := m.fnLit(); fn != nil {
				checkContexts(pass, m, fn)
				checkFencing(pass, m, fn)
			}
		}
		return true
	})

	ins.Preorder([]ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)}, func(n ast.Node) {
		f := newFuncInfo(pass, cfgs, n)
		if f == nil {
			return
		}
		checkLeaks(pass, f)
		checkUseAfterRelease(pass, f)
	})
	return nil, nil
}

// method is a call of one of lockkit's methods: Do, TryDo, Acquire,
// TryAcquire (of Lock or Semaphore, also promoted through a wrapper type),
// Lead (of Election), Release and Fence (of *Lease) or Number (of *Term).
type method struct {
	name     string // "" when the call is not one of them
	call     *ast.CallExpr
	recv     ast.Expr // the receiver expression; nil if unknown
	recvType types.Type
	args     []ast.Expr // the arguments after the receiver
}

// fnLit returns the fn argument of Do, TryDo or Lead when it is a function
// literal.
func (m method) fnLit() *ast.FuncLit {
	if len(m.args) < 2 {
		return nil
	}
	fn, _ := ast.Unparen(m.args[1]).(*ast.FuncLit)
	return fn
}

// displayName is how a message names the method: TableLock.Do,
// Lease.Release.
func (m method) displayName() string {
	if m.recvType != nil {
		t := m.recvType
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := types.Unalias(t).(*types.Named); ok {
			return n.Obj().Name() + "." + m.name
		}
	}
	return m.name
}

// lockkitCall tells whether call invokes one of lockkit's methods, matched
// by package path, type name and method name, never by source text.
func lockkitCall(info *types.Info, call *ast.CallExpr) method {
	fn, _ := typeutil.Callee(info, call).(*types.Func)
	if fn == nil {
		return method{}
	}
	fn = fn.Origin()
	if fn.Pkg() == nil || fn.Pkg().Path() != lockkitPath {
		return method{}
	}
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return method{}
	}
	switch recvName(sig.Recv().Type()) + "." + fn.Name() {
	case "Lock.Do", "Lock.TryDo", "Lock.Acquire", "Lock.TryAcquire",
		"Semaphore.Do", "Semaphore.TryDo", "Semaphore.Acquire", "Semaphore.TryAcquire",
		"Election.Lead", "Lease.Release", "Lease.Fence", "Term.Number":
	default:
		return method{}
	}
	m := method{name: fn.Name(), call: call, args: call.Args}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return method{}
	}
	s := info.Selections[sel]
	if s == nil {
		return method{}
	}
	switch s.Kind() {
	case types.MethodVal:
		m.recv = sel.X
		m.recvType = s.Recv()
	case types.MethodExpr:
		// lockkit.Lock.Do(l, ctx, fn): the receiver is the first argument.
		if len(call.Args) == 0 {
			return method{}
		}
		m.recv = call.Args[0]
		m.recvType = s.Recv()
		m.args = call.Args[1:]
	default:
		return method{}
	}
	return m
}

// recvName is the name of a lockkit receiver type (Lock, Lease), or "".
func recvName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != lockkitPath {
		return ""
	}
	return n.Obj().Name()
}

// isLeaseType reports whether t is *lockkit.Lease.
func isLeaseType(t types.Type) bool {
	p, ok := types.Unalias(t).(*types.Pointer)
	return ok && recvName(p.Elem()) == "Lease"
}

// isTermType reports whether t is *lockkit.Term, an election's lease.
func isTermType(t types.Type) bool {
	p, ok := types.Unalias(t).(*types.Pointer)
	return ok && recvName(p.Elem()) == "Term"
}

// isContextType reports whether t is context.Context.
func isContextType(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

// localVar returns the variable that the identifier e refers to, or nil.
func localVar(info *types.Info, e ast.Expr) *types.Var {
	id, ok := ast.Unparen(e).(*ast.Ident)
	if !ok {
		return nil
	}
	v, _ := info.ObjectOf(id).(*types.Var)
	if v == nil || v.IsField() {
		return nil
	}
	return v
}

// isNilCompare reports whether n is a comparison, == or != (lease != nil,
// say): it reads the pointer, not the lease.
func isNilCompare(n ast.Node) bool {
	b, ok := n.(*ast.BinaryExpr)
	return ok && (b.Op == token.EQL || b.Op == token.NEQ)
}

// line is the line number of pos.
func line(pass *analysis.Pass, pos token.Pos) int { return pass.Fset.Position(pos).Line }
