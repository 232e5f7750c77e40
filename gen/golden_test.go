package gen

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden from the current output")

// goldenCase is one folder of testdata/golden: a lockkit.yaml, an optional
// args.txt (more flags, one a line), and the expected result: locks_gen.go
// for a case that generates, stderr.txt for one that must fail with exit 1.
type goldenCase struct {
	name, dir string
}

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", "golden"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, e := range entries {
		if e.IsDir() {
			dir, err := filepath.Abs(filepath.Join("testdata", "golden", e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, goldenCase{e.Name(), dir})
		}
	}
	return cases
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestGolden runs the command on every case, from the case's folder (so that
// positions read "lockkit.yaml:LINE:COL"), and compares the generated file or
// the exact error text.
func TestGolden(t *testing.T) {
	var passing, failing int
	for _, c := range goldenCases(t) {
		wantOutPath := filepath.Join(c.dir, "locks_gen.go")
		wantErrPath := filepath.Join(c.dir, "stderr.txt")
		switch {
		case exists(wantOutPath) && exists(wantErrPath):
			t.Errorf("%s: has both locks_gen.go and stderr.txt", c.name)
			continue
		case exists(wantOutPath):
			passing++
		case exists(wantErrPath):
			failing++
		case !*update:
			t.Errorf("%s: has neither locks_gen.go nor stderr.txt; run go test ./gen -run TestGolden -update", c.name)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			// The command runs in a copy of the case's folder, writing
			// locks_gen.go beside lockkit.yaml as go generate would, so the
			// header's -config is what it is for users; the goldens stay in
			// the case's folder.
			dir, err := filepath.Abs(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			golden := func(name string) string { return filepath.Join(dir, name) }
			work := t.TempDir()
			schemaSrc, err := os.ReadFile(golden("lockkit.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, "lockkit.yaml"), schemaSrc, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Chdir(work)
			out := "locks_gen.go"
			args := []string{"-config", "lockkit.yaml", "-out", out}
			if extra, err := os.ReadFile(golden("args.txt")); err == nil {
				args = append(args, strings.Fields(string(extra))...)
			}
			var stderr bytes.Buffer
			code := Run(args, &stderr)
			got, readErr := os.ReadFile(out)

			if *update {
				switch code {
				case 0:
					writeGolden(t, golden("locks_gen.go"), got)
					os.Remove(golden("stderr.txt"))
				case 1:
					writeGolden(t, golden("stderr.txt"), stderr.Bytes())
					os.Remove(golden("locks_gen.go"))
				default:
					t.Fatalf("exit %d:\n%s", code, stderr.String())
				}
				return
			}

			if exists(golden("stderr.txt")) {
				want, _ := os.ReadFile(golden("stderr.txt"))
				if code != 1 {
					t.Errorf("exit %d, want 1", code)
				}
				if stderr.String() != string(want) {
					t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
				}
				if readErr == nil {
					t.Errorf("a failing run wrote %s", out)
				}
				return
			}
			want, _ := os.ReadFile(golden("locks_gen.go"))
			if code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from locks_gen.go (run go test ./gen -run TestGolden -update and review the diff):\n%s", firstDiff(string(got), string(want)))
			}
		})
	}
}

func writeGolden(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + gl + "\nwant: " + wl
		}
	}
	return "(no line differs)"
}

// Every golden output, and the committed generated packages, compile and pass
// go vet against this repository's runtime: one temporary module holds them
// all (a replace line points at the repo), checked by one go vet.
func TestGoldenOutputsCompile(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("no go line in go.mod")
	}

	mod := t.TempDir()
	write := func(rel string, data []byte) {
		t.Helper()
		path := filepath.Join(mod, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", []byte("module lockkit.test/golden\n\n"+string(goLine)+"\n\nrequire github.com/lockkit/lockkit v0.0.0\n\nreplace github.com/lockkit/lockkit => "+repo+"\n"))
	if sum, err := os.ReadFile(filepath.Join(repo, "go.sum")); err == nil {
		write("go.sum", sum)
	}
	n := 0
	for _, c := range goldenCases(t) {
		src, err := os.ReadFile(filepath.Join(c.dir, "locks_gen.go"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(c.name, "locks_gen.go"), src)
		n++
	}
	if n == 0 {
		t.Fatal("no golden outputs to compile")
	}
	// Also for a 32-bit target (issue 31): a count the schema accepts
	// must not overflow int there ("constant overflows int").
	for _, arch := range []string{"", "386"} {
		cmd := exec.Command(goBin, "vet", "./...")
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if arch != "" {
			cmd.Env = append(cmd.Env, "GOARCH="+arch)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go vet (GOARCH %q) of %d golden outputs: %v\n%s", arch, n, err, out)
		}
	}
}
