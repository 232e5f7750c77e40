package scriptcheck

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The outputs the stub `go` prints, each a case scripts/fuzz.sh must tell
// apart: Go 1.26's coordinator reporting its own -fuzztime deadline
// (go.dev/issue/75804; this is CI's FuzzGenerateText failure, verbatim but
// for the names), a real failure of the target, and a failing input written.
var outputs = map[string]string{
	"pass": "fuzz: elapsed: 10s, execs: 6009 (600/sec), new interesting: 0 (total: 1)\nPASS\nok  \texample.com/m/pkg\t10.1s\n",
	"coordinator": "fuzz: elapsed: 9s, execs: 6009 (1284/sec), new interesting: 12 (total: 224)\n" +
		"fuzz: elapsed: 11s, execs: 6009 (0/sec), new interesting: 12 (total: 224)\n" +
		"--- FAIL: FuzzA (11.11s)\n    context deadline exceeded\nFAIL\nexit status 1\nFAIL\texample.com/m/pkg\t11.121s\n",
	"own": "--- FAIL: FuzzA (0.52s)\n    --- FAIL: FuzzA (0.00s)\n        a_test.go:9: context deadline exceeded\n\nFAIL\nexit status 1\n",
	"written": "--- FAIL: FuzzA (0.52s)\n    context deadline exceeded\n\n    Failing input written to testdata/fuzz/FuzzA/0123abcd\n" +
		"    To re-run:\n    go test -run=FuzzA/0123abcd\nFAIL\nexit status 1\n",
}

// runFuzzScript runs scripts/fuzz.sh in a module of one fuzz target, FuzzA,
// with a stub `go` whose nth call prints plan[n] (the last entry for later
// calls), and returns the script's exit code, how many times it called go,
// and what it printed.
func runFuzzScript(t *testing.T, plan ...string) (code, calls int, out string) {
	t.Helper()
	script, err := filepath.Abs("../../scripts/fuzz.sh")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("repo/scripts/fuzz.sh", string(src), 0o755)
	write("repo/pkg/a_test.go", "package pkg\n\nimport \"testing\"\n\nfunc FuzzA(f *testing.F) {\n\tf.Fuzz(func(t *testing.T, s string) {})\n}\n", 0o644)
	for name, text := range outputs {
		write("outputs/"+name, text, 0o644)
	}
	// The stub: counts its calls, prints the planned output, and for
	// "written" leaves an input in the target's corpus as go test does.
	write("bin/go", `#!/bin/sh
n=$(($(cat "$STUB/calls" 2>/dev/null || echo 0) + 1))
echo "$n" > "$STUB/calls"
mode=$(echo "$STUB_PLAN" | cut -d, -f"$n")
[ -n "$mode" ] || mode=$(echo "$STUB_PLAN" | tr , '\n' | tail -n 1)
cat "$STUB/outputs/$mode"
case "$mode" in
pass) exit 0 ;;
written) mkdir -p pkg/testdata/fuzz/FuzzA && : > pkg/testdata/fuzz/FuzzA/0123abcd ;;
esac
exit 1
`, 0o755)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = filepath.Join(dir, "repo")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	git("init", "-q")
	git("add", ".")

	cmd := exec.Command("bash", filepath.Join(dir, "repo/scripts/fuzz.sh"))
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"STUB="+dir, "STUB_PLAN="+strings.Join(plan, ","), "LOCKKIT_FUZZTIME=1s")
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running fuzz.sh: %v", err)
	}
	if c, err := os.ReadFile(filepath.Join(dir, "calls")); err == nil {
		calls, _ = strconv.Atoi(strings.TrimSpace(string(c)))
	}
	return code, calls, string(b)
}

// TestFuzzScriptRetriesOnlyTheCoordinatorsDeadline: the coordinator's own
// deadline report is run again, at most twice; a failure of the target, or
// a run that wrote a failing input, fails the script at once.
func TestFuzzScriptRetriesOnlyTheCoordinatorsDeadline(t *testing.T) {
	for _, c := range []struct {
		name      string
		plan      []string
		wantFail  bool
		wantCalls int
	}{
		{"pass", []string{"pass"}, false, 1},
		{"coordinator deadline once", []string{"coordinator", "pass"}, false, 2},
		{"coordinator deadline twice", []string{"coordinator", "coordinator", "pass"}, false, 3},
		{"coordinator deadline every time", []string{"coordinator"}, true, 3},
		{"target's own failure", []string{"own", "pass"}, true, 1},
		{"failing input written", []string{"written", "pass"}, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, calls, out := runFuzzScript(t, c.plan...)
			if (code != 0) != c.wantFail || calls != c.wantCalls {
				t.Fatalf("exit %d after %d go test runs, want failure=%v after %d\n%s", code, calls, c.wantFail, c.wantCalls, out)
			}
			if retried := strings.Count(out, "go.dev/issue/75804"); retried != calls-1 {
				t.Fatalf("%d retry lines, for %d runs\n%s", retried, calls, out)
			}
			if !c.wantFail && !strings.Contains(out, "fuzz: 1 targets, 1s each: no failure") {
				t.Fatalf("no closing line\n%s", out)
			}
		})
	}
}
