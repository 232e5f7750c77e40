package autopipeline_test

import (
	"go/types"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

const goRedis = "github.com/redis/go-redis/v9"

// TestOnlyAutopipelineUsesAutopipelining: go-redis marks autopipelining
// experimental, so a go-redis release may change it. Only this package may
// use it, so that such a release breaks the build of the programs that
// import goredis/autopipeline and of no other lockkit package.
func TestOnlyAutopipelineUsesAutopipelining(t *testing.T) {
	const self = "github.com/lockkit/lockkit/goredis/autopipeline"
	// Type-check only the packages that import go-redis: one that does not
	// cannot name its API.
	all, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedImports}, "github.com/lockkit/lockkit/...")
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, p := range all {
		if _, ok := p.Imports[goRedis]; ok {
			users = append(users, p.PkgPath)
		}
	}
	if len(all) < 20 || !slices.Contains(users, self) || !slices.Contains(users, "github.com/lockkit/lockkit/goredis") {
		t.Fatalf("listed %d packages, %d importing go-redis (%v): the walk is broken", len(all), len(users), users)
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax}, users...)
	if err != nil {
		t.Fatal(err)
	}
	checked, selfUses := 0, 0
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		checked++
		for id, obj := range p.TypesInfo.Uses {
			if !autopipelining(obj) {
				continue
			}
			if p.PkgPath == self {
				selfUses++
				continue
			}
			t.Errorf("%s: %s uses go-redis's experimental %s: only %s may", p.Fset.Position(id.Pos()), p.PkgPath, obj.Name(), self)
		}
	}
	// The walk must see the uses it forbids elsewhere, or a broken walk
	// would pass.
	if checked != len(users) || selfUses == 0 {
		t.Fatalf("walked %d packages and found %d uses in %s: the walk is broken", checked, selfUses, self)
	}
}

// autopipelining reports a go-redis object of its autopipelining API: a
// name with AutoPipeline or AutoFuture in it (rdb.AsyncAutoPipeline), or a
// method of such a type (ap.Submit).
func autopipelining(obj types.Object) bool {
	if obj.Pkg() == nil || obj.Pkg().Path() != goRedis {
		return false
	}
	names := []string{obj.Name()}
	if f, ok := obj.(*types.Func); ok {
		if recv := f.Signature().Recv(); recv != nil {
			names = append(names, types.TypeString(recv.Type(), nil))
		}
	}
	for _, n := range names {
		if strings.Contains(n, "AutoPipeline") || strings.Contains(n, "AutoFuture") {
			return true
		}
	}
	return false
}
