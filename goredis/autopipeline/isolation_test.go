package autopipeline_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyAutopipelineUsesAutopipelining: go-redis marks autopipelining
// experimental, so a go-redis release may change it. Only this package may
// use it, so that such a release breaks the build of the programs that
// import goredis/autopipeline and of no other lockkit package.
//
// Every use names it: an autopipeliner is had only from a go-redis function
// or type with AutoPipeline in its name (rdb.AsyncAutoPipeline,
// redis.AutoPipeliner, Options.AutoPipelineOptions), and its replies are
// AutoFutures. So the test reads the syntax of every non-test Go file of the
// module, whatever its build tags, and fails on an identifier holding either
// word outside this package. (A type-checked walk would compile the module
// once more in the middle of CI.)
func TestOnlyAutopipelineUsesAutopipelining(t *testing.T) {
	root, self := filepath.Join("..", ".."), "goredis/autopipeline"
	fset := token.NewFileSet()
	files, selfUses := 0, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // another module (tools)
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
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || !(strings.Contains(id.Name, "AutoPipeline") || strings.Contains(id.Name, "AutoFuture")) {
				return true
			}
			if filepath.ToSlash(filepath.Dir(rel)) == self {
				selfUses++
			} else {
				t.Errorf("%s: %s names go-redis's experimental autopipelining: only package %s may", fset.Position(id.Pos()), id.Name, self)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must see the uses it forbids elsewhere, or a broken walk
	// would pass.
	if files < 100 || selfUses == 0 {
		t.Fatalf("read %d files and found %d uses in %s: the walk is broken", files, selfUses, self)
	}
}
