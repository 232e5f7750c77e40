package vet_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/packages"
)

const lockkitPath = "github.com/lockkit/lockkit/lockkit"

// TestStubMatchesRuntime ties the testdata stub of lockkit to the real
// package: every type, variable and method the stub declares exists in the
// runtime with the same kind and signature, so the analyzer's tests cannot
// pass against an API that has moved on.
func TestStubMatchesRuntime(t *testing.T) {
	stub := loadStub(t)
	real := loadRuntime(t)

	names := stub.Scope().Names()
	if len(names) == 0 {
		t.Fatal("the stub declares nothing")
	}
	checked := 0
	for _, name := range names {
		s := stub.Scope().Lookup(name)
		if !s.Exported() {
			continue
		}
		r := real.Scope().Lookup(name)
		if r == nil {
			t.Errorf("the stub declares %s, the runtime does not", name)
			continue
		}
		switch s := s.(type) {
		case *types.TypeName:
			r, ok := r.(*types.TypeName)
			if !ok {
				t.Errorf("%s is a type in the stub, a %T in the runtime", name, real.Scope().Lookup(name))
				continue
			}
			checked += compareMethods(t, s, r)
		case *types.Var:
			if r, ok := r.(*types.Var); !ok || typeString(s.Type()) != typeString(r.Type()) {
				t.Errorf("var %s: stub %s, runtime %s", name, types.ObjectString(s, qualifier), types.ObjectString(real.Scope().Lookup(name), qualifier))
			}
			checked++
		default:
			t.Errorf("the stub declares %s, a %T: add a comparison for it", name, s)
		}
	}
	if checked < 10 {
		t.Errorf("compared only %d declarations of the stub", checked)
	}
}

// compareMethods checks every method of the stub's type s against the
// runtime's type r and returns how many it compared.
func compareMethods(t *testing.T, s, r *types.TypeName) int {
	t.Helper()
	sm := types.NewMethodSet(types.NewPointer(s.Type()))
	rm := types.NewMethodSet(types.NewPointer(r.Type()))
	n := 0
	for sel := range sm.Methods() {
		m := sel.Obj()
		if !m.Exported() {
			continue
		}
		rsel := rm.Lookup(r.Pkg(), m.Name())
		if rsel == nil {
			t.Errorf("the stub's %s has method %s, the runtime's does not", s.Name(), m.Name())
			continue
		}
		if got, want := recvString(m), recvString(rsel.Obj()); got != want {
			t.Errorf("%s.%s: receiver %s in the stub, %s in the runtime", s.Name(), m.Name(), got, want)
		}
		if got, want := typeString(m.Type()), typeString(rsel.Obj().Type()); got != want {
			t.Errorf("%s.%s: stub %s, runtime %s", s.Name(), m.Name(), got, want)
		}
		n++
	}
	return n
}

func recvString(obj types.Object) string {
	return typeString(obj.Type().(*types.Signature).Recv().Type())
}

// qualifier writes lockkit's own names bare and others by package name, so
// that types of the stub and of the runtime print alike.
func qualifier(p *types.Package) string {
	if p.Path() == lockkitPath {
		return ""
	}
	return p.Name()
}

func typeString(t types.Type) string { return types.TypeString(t, qualifier) }

func loadStub(t *testing.T) *types.Package {
	t.Helper()
	dir := filepath.Join("testdata", "src", filepath.FromSlash(lockkitPath))
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check(lockkitPath, fset, files, nil)
	if err != nil {
		t.Fatalf("type-checking the stub: %v", err)
	}
	return pkg
}

func loadRuntime(t *testing.T) *types.Package {
	t.Helper()
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes}, lockkitPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 || pkgs[0].Types == nil {
		t.Fatalf("loading %s: %v", lockkitPath, pkgs)
	}
	return pkgs[0].Types
}
