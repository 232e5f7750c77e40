package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// publicPackages are the packages an application imports; each of their
// entry points has a doc example.
var publicPackages = []string{"lockkit", "fence", "breaker", "telemetry", "telemetry/otelsetup", "postgres", "etcd"}

// TestEveryEntryPointHasAnExample: every entry point of the public packages
// is named by an Example function (ExampleF or ExampleT_M, with an optional
// _suffix) in the package's tests, so that go doc shows how to use it. An
// entry point is an exported function (constructors and options included), or
// an exported method that starts an operation: one whose first parameter is a
// context.Context (Do, Acquire, Close, Update, ...), and Client.Domain.
// Accessors (Lease.Fence, Lock.Key) and types alone are not entry points.
func TestEveryEntryPointHasAnExample(t *testing.T) {
	root := repoRoot(t)
	for _, pkg := range publicPackages {
		dir := filepath.Join(root, pkg)
		entries, examples := scanPackage(t, dir)
		var missing []string
		for _, e := range entries {
			if !covered(e, examples) {
				missing = append(missing, e)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s: no Example for %s", pkg, strings.Join(missing, ", "))
		}
	}
}

// covered reports whether an example names entry: "F" by ExampleF or
// ExampleF_suffix, "T.M" by ExampleT_M or ExampleT_M_suffix.
func covered(entry string, examples []string) bool {
	want := "Example" + strings.ReplaceAll(entry, ".", "_")
	for _, ex := range examples {
		if ex == want {
			return true
		}
		if rest, ok := strings.CutPrefix(ex, want+"_"); ok && rest != "" && rest[0] >= 'a' && rest[0] <= 'z' {
			return true // a suffix starts with a lower-case letter
		}
	}
	return false
}

// scanPackage returns the package's entry points and the names of its
// Example functions.
func scanPackage(t *testing.T, dir string) (entries, examples []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no Go files (%v)", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		test := strings.HasSuffix(f, "_test.go")
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if test {
					if d.Recv == nil && strings.HasPrefix(name, "Example") {
						examples = append(examples, name)
					}
					continue
				}
				if !ast.IsExported(name) {
					continue
				}
				if d.Recv == nil {
					entries = append(entries, name)
					continue
				}
				recv := receiverType(d.Recv.List[0].Type)
				if ast.IsExported(recv) && (takesContext(d) || recv+"."+name == "Client.Domain") {
					entries = append(entries, recv+"."+name)
				}
			}
		}
	}
	slices.Sort(entries)
	return entries, examples
}

// takesContext reports whether fn's first parameter is a context.Context.
func takesContext(fn *ast.FuncDecl) bool {
	ps := fn.Type.Params.List
	if len(ps) == 0 {
		return false
	}
	sel, ok := ps[0].Type.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Context"
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return receiverType(e.X)
	}
	return ""
}
