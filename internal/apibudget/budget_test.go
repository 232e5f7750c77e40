package apibudget

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// budget is the most exported names the public packages may hold (issue 20).
const budget = 150

// A name is a top-level exported identifier of a package's non-test files:
// a function (not a method), a type, a variable or a constant. Methods and
// struct fields are not counted. A public package is every package of the
// module outside internal/, examples/, cmd/ and testdata/ that is not a
// command (package main).

// skipped are the directories (from the module root) whose packages are not
// public API.
var skipped = []string{"internal", "examples", "cmd"}

// exportedNames walks the module from root and returns each public package's
// exported names, keyed by the package's directory.
func exportedNames(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") ||
				base == "testdata" || base == "internal" || slices.Contains(skipped, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		names := out[dir]
		if names == nil {
			names = []string{} // a public package with no exported names still counts as found
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil && decl.Name.IsExported() {
					names = append(names, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() {
							names = append(names, spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
		out[dir] = names
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, names := range out {
		slices.Sort(names)
		out[dir] = slices.Compact(names) // a name declared per build tag counts once
	}
	return out
}

func TestExportedNamesWithinBudget(t *testing.T) {
	pkgs := exportedNames(t, filepath.Join("..", ".."))
	// The walk must see the public API, or a broken walk would pass.
	for _, want := range []string{"lockkit", "driver", "driver/drivertest", "schema", "telemetry", "postgres", "goredis"} {
		if len(pkgs[want]) == 0 {
			t.Fatalf("package %s: no exported names found; the walk is broken (found %d packages)", want, len(pkgs))
		}
	}
	for _, bad := range []string{"internal/policy", "examples/locks", "cmd/lockkit"} {
		if _, ok := pkgs[bad]; ok {
			t.Fatalf("package %s counted: it is not public API", bad)
		}
	}
	dirs := make([]string, 0, len(pkgs))
	total := 0
	for dir, names := range pkgs {
		dirs = append(dirs, dir)
		total += len(names)
	}
	slices.Sort(dirs)
	t.Logf("%d exported names over %d public packages (budget %d)", total, len(dirs), budget)
	if total > budget {
		for _, dir := range dirs {
			t.Logf("  %-20s %3d  %s", dir, len(pkgs[dir]), strings.Join(pkgs[dir], " "))
		}
		t.Errorf("%d exported names over the public packages, budget %d (issue 20): unexport or move to internal/ what users do not need", total, budget)
	}
}
