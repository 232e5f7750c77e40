package importcheck

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// heavy are the import path prefixes a light package must not link.
var heavy = []string{
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"google.golang.org/protobuf",
	"google.golang.org/grpc",
}

// light are the packages an application links by importing lockkit or its
// generated code.
var light = []string{"./lockkit", "./telemetry", "./breaker", "./fence", "./schema", "./examples/locks"}

func isHeavy(path string) bool {
	for _, p := range heavy {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// graph is the import graph below one package: each dependency's imports.
type graph struct {
	root    string
	imports map[string][]string
}

// deps runs go list -deps (test files excluded: they are not linked) from the
// module root.
func deps(t *testing.T, pkg string) graph {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	g := graph{imports: map[string][]string{}}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		f := strings.Fields(line)
		g.imports[f[0]] = f[1:]
	}
	// go list -deps prints the root last.
	g.root = strings.Fields(lines[len(lines)-1])[0]
	return g
}

// chain is one import path from the root to target, for the error message.
func (g graph) chain(target string) []string {
	prev := map[string]string{g.root: ""}
	queue := []string{g.root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var c []string
			for ; p != ""; p = prev[p] {
				c = append(c, p)
			}
			slices.Reverse(c)
			return c
		}
		for _, q := range g.imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// TestLightImport: the packages an application gets by importing lockkit link
// no OpenTelemetry SDK, exporter, protobuf or gRPC package. A failure names
// the import chain that pulls the first heavy package in.
func TestLightImport(t *testing.T) {
	for _, pkg := range light {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			g := deps(t, pkg)
			if len(g.imports) < 2 {
				t.Fatalf("go list -deps %s listed %d packages", pkg, len(g.imports))
			}
			var found []string
			for p := range g.imports {
				if isHeavy(p) {
					found = append(found, p)
				}
			}
			slices.Sort(found)
			if len(found) > 0 {
				t.Errorf("%s links %d heavy packages, e.g. through\n\t%s\nall: %s",
					pkg, len(found), strings.Join(g.chain(found[0]), "\n\t→ "), strings.Join(found, " "))
			}
		})
	}
}

// TestHeavyIsDetected keeps TestLightImport honest: the setup package for
// applications does link the SDK and exporters, and the check sees it; the
// runtime does link the OpenTelemetry API.
func TestHeavyIsDetected(t *testing.T) {
	g := deps(t, "./telemetry/otelsetup")
	for _, want := range []string{"go.opentelemetry.io/otel/sdk/trace", "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp", "google.golang.org/protobuf/proto"} {
		if _, ok := g.imports[want]; !ok || !isHeavy(want) {
			t.Errorf("otelsetup: %s not listed as a heavy dependency", want)
		}
	}
	if c := g.chain("go.opentelemetry.io/otel/sdk/trace"); len(c) < 2 || c[0] != "github.com/lockkit/lockkit/telemetry/otelsetup" {
		t.Errorf("chain to the SDK = %v", c)
	}
	if _, ok := deps(t, "./lockkit").imports["go.opentelemetry.io/otel/trace"]; !ok {
		t.Error("lockkit does not link the OpenTelemetry trace API: is go list answering for the right module?")
	}
}

// stores are the store clients: each is linked only by its own backend
// package (and by what an application picks).
var stores = []string{
	"github.com/redis/go-redis",
	"github.com/jackc/pgx",
	"go.etcd.io/etcd",
	"github.com/go-zookeeper/zk",
}

func storeOf(path string) string {
	for _, p := range stores {
		if path == p || strings.HasPrefix(path, p+"/") {
			return p
		}
	}
	return ""
}

// TestRuntimeLinksNoStore: the runtime and the seam link no store's client
// (go list -deps ./lockkit lists none), and a backend links only its own: a
// program that uses only PostgreSQL does not link go-redis. The positive
// rows keep the check honest.
func TestRuntimeLinksNoStore(t *testing.T) {
	cases := []struct {
		pkg   string
		allow string // the one store the package may (and must) link; "" none
	}{
		{"./lockkit", ""},
		{"./driver", ""},
		{"./breaker", ""},
		{"./telemetry", ""},
		{"./schema", ""},
		{"./postgres", "github.com/jackc/pgx"},
		{"./goredis", "github.com/redis/go-redis"},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.pkg, "./"), func(t *testing.T) {
			g := deps(t, tc.pkg)
			linked := map[string]string{}
			for p := range g.imports {
				if s := storeOf(p); s != "" {
					linked[s] = p
				}
			}
			for s, p := range linked {
				if s != tc.allow {
					t.Errorf("%s links the store client %s, through\n\t%s", tc.pkg, s, strings.Join(g.chain(p), "\n\t→ "))
				}
			}
			if tc.allow != "" && linked[tc.allow] == "" {
				t.Errorf("%s does not link %s: is the check looking at the right module?", tc.pkg, tc.allow)
			}
		})
	}
}
