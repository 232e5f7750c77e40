package vet

import (
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/ctrlflow"
	"golang.org/x/tools/go/cfg"
	"golang.org/x/tools/go/types/typeutil"
)

// funcInfo is one function (declared or literal) with what the
// flow-sensitive checks need.
type funcInfo struct {
	body  *ast.BlockStmt
	g     *cfg.CFG
	sig   *types.Signature // nil when type information is missing
	scope *types.Scope     // the function's own scope
}

func newFuncInfo(pass *analysis.Pass, cfgs *ctrlflow.CFGs, n ast.Node) *funcInfo {
	f := &funcInfo{}
	switch n := n.(type) {
	case *ast.FuncDecl:
		if n.Body == nil {
			return nil
		}
		f.body = n.Body
		f.g = cfgs.FuncDecl(n)
		if obj, ok := pass.TypesInfo.Defs[n.Name].(*types.Func); ok {
			f.sig, _ = obj.Type().(*types.Signature)
		}
		f.scope = pass.TypesInfo.Scopes[n.Type]
	case *ast.FuncLit:
		if n.Body == nil {
			return nil
		}
		f.body = n.Body
		f.g = cfgs.FuncLit(n)
		if tv, ok := pass.TypesInfo.Types[n]; ok {
			f.sig, _ = tv.Type.(*types.Signature)
		}
		f.scope = pass.TypesInfo.Scopes[n.Type]
	default:
		return nil
	}
	if f.g == nil || f.scope == nil {
		return nil
	}
	return f
}

// owns reports whether v is declared in this function (its parameters,
// results or body), so that no other code can reach it by name.
func (f *funcInfo) owns(v *types.Var) bool {
	return v != nil && f.scope.Contains(v.Pos())
}

// isNamedResult reports whether v is one of the function's named results.
func (f *funcInfo) isNamedResult(v *types.Var) bool {
	if f.sig == nil {
		return false
	}
	for r := range f.sig.Results().Variables() {
		if r == v {
			return true
		}
	}
	return false
}

// find returns the block and index of node n in the CFG, or nil.
func (f *funcInfo) find(n ast.Node) (*cfg.Block, int) {
	for _, b := range f.g.Blocks {
		for i, m := range b.Nodes {
			if m == n {
				return b, i
			}
		}
	}
	return nil, 0
}

// inspectOwn walks n in preorder with its stack of ancestors, without
// entering function literals: those are functions of their own. visit sees
// the function literal itself, and returning false skips a node's children.
func inspectOwn(n ast.Node, visit func(n ast.Node, stack []ast.Node) bool) {
	ast.PreorderStack(n, nil, func(n ast.Node, stack []ast.Node) bool {
		if !visit(n, stack) {
			return false
		}
		_, lit := n.(*ast.FuncLit)
		return !lit
	})
}

// parentOf returns the nearest ancestor in stack that is not a
// parenthesis, and its index, or nil.
func parentOf(stack []ast.Node) (ast.Node, int) {
	for i := len(stack) - 1; i >= 0; i-- {
		if _, ok := stack[i].(*ast.ParenExpr); !ok {
			return stack[i], i
		}
	}
	return nil, -1
}

// refersTo reports whether n mentions v anywhere, function literals
// included.
func refersTo(info *types.Info, n ast.Node, v *types.Var) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && info.Uses[id] == v {
			found = true
		}
		return !found
	})
	return found
}

// formatsOnly reports whether call only formats or logs its arguments: a
// function or method of fmt, log, log/slog or errors (fmt.Errorf,
// log.Printf, logger.Info, slog.Any, ...). An argument passed there is
// read, not handed on and not written anywhere.
func formatsOnly(info *types.Info, call *ast.CallExpr) bool {
	f, ok := typeutil.Callee(info, call).(*types.Func)
	if !ok || f.Pkg() == nil {
		return false
	}
	switch f.Pkg().Path() {
	case "fmt", "log", "log/slog", "errors":
		return true
	}
	return false
}

// argOf reports whether the node stack[i+1] (or id, at the top) is one of
// call's arguments.
func argOf(call *ast.CallExpr, stack []ast.Node, i int, id *ast.Ident) bool {
	return inList(call.Args, stack, i, id)
}
