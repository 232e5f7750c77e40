package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommand builds lockkit-vet and runs it on a testdata package of the
// analyzer both ways, standalone and through go vet -vettool: each must
// report the package's misuse with file:line:col and exit non-zero.
func TestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	tool := filepath.Join(t.TempDir(), "lockkit-vet")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	gopath, err := filepath.Abs(filepath.Join("..", "..", "vet", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPATH="+gopath, "GO111MODULE=off", "GOFLAGS=", "GOWORK=off")

	for name, args := range map[string][]string{
		"standalone": {tool, "leak"},
		"go vet":     {"go", "vet", "-vettool=" + tool, "leak"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = filepath.Join(gopath, "src", "leak")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("%v: want a non-zero exit for reported misuse, got %v\n%s", args, err, out)
			}
			for _, want := range []string{
				"leak.go:21:16: the lease from TableLock.Acquire is not released on every path",
				"leak.go:83:17: the lease from TableLock.TryAcquire is not released on every path",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%v: output lacks %q:\n%s", args, want, out)
				}
			}
			if strings.Contains(string(out), "leak.go:122:") {
				t.Errorf("%v: reported the deferred release at leak.go:122:\n%s", args, out)
			}
		})
	}
}
