// Package testlog is the one place of the test runs' key-mode rule (issue
// 34): under LOCKKIT_TEST_KEYMODE=hashed, which scripts/test.sh sets, every
// test client of every package, and every fault-harness worker, runs under
// telemetry.KeyHashed, and every log line it writes is scanned for a raw
// lock key. A test's client takes its logger from Logger and its key mode
// from KeyMode; a child process writes its log lines to a file (FileLogger)
// that its test scans with RawKeyLines. A test that checks what the default
// key mode (KeyRaw) records opts out with RawLogger and its own key mode,
// saying why.
package testlog

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/lockkit/lockkit/telemetry"
)

// Env names the variable that sets the run's key mode: "hashed" (the
// default of scripts/test.sh) or anything else for the default KeyRaw.
const Env = "LOCKKIT_TEST_KEYMODE"

// Hashed reports whether this run's test clients log under KeyHashed.
func Hashed() bool { return os.Getenv(Env) == "hashed" }

// secret is the hashed runs' HMAC secret.
var secret = []byte("scan-secret")

// KeyMode is the key mode and hash secret of this run's test clients, for
// lockkit.WithKeyMode(testlog.KeyMode()).
func KeyMode() (telemetry.KeyMode, []byte) {
	if Hashed() {
		return telemetry.KeyHashed, secret
	}
	return telemetry.KeyRaw, nil
}

// rawKeyRE matches a lock key as the tests build it, a prefix and then the
// hash tag in braces, and the same key escaped into a ZooKeeper node name
// (the braces as %7B and %7D); submatch 2 or 3 is the tag.
var rawKeyRE = regexp.MustCompile(`[^\s"=]+(\{([^{}\s"]*)\}|%7B([^\s"]*?)%7D)`)

// hashRE is a key as KeyHashed shows it (telemetry.HashKey). A tag replaced
// by it is not a raw key: lockkit writes the shown key in place of the raw
// key and of its tag, wherever a backend's error quotes them.
var hashRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// RawKey is the first raw lock key that line quotes, or "".
func RawKey(line string) string {
	for _, m := range rawKeyRE.FindAllStringSubmatch(line, -1) {
		if !hashRE.MatchString(m[2] + m[3]) {
			return m[0]
		}
	}
	return ""
}

// RawKeyLines reads log lines from r and returns those that quote a raw
// key.
func RawKeyLines(r io.Reader) ([]string, error) {
	var bad []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if RawKey(sc.Text()) != "" {
			bad = append(bad, sc.Text())
		}
	}
	return bad, sc.Err()
}

// Logger is a test client's logger: every line, at every level, goes to the
// test log until the test ends (a Close in a cleanup may still log), and in
// a hashed run a line that quotes a raw key fails the test.
func Logger(t testing.TB) *slog.Logger { return logTo(t, Hashed()) }

// RawLogger is Logger without the scan, for a client that logs raw keys on
// purpose (KeyRaw in every run); its caller says why.
func RawLogger(t testing.TB) *slog.Logger { return logTo(t, false) }

func logTo(t testing.TB, scan bool) *slog.Logger {
	w := &testWriter{t: t, scan: scan}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(newHandler(w))
}

func newHandler(w io.Writer) slog.Handler {
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})
}

// FileLogger is the logger of a process a test starts (a fault-harness
// worker): its lines go to w, a file its test scans after the run with
// RawKeyLines.
func FileLogger(w io.Writer) *slog.Logger { return slog.New(newHandler(w)) }

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	scan bool
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	if k := RawKey(line); w.scan && k != "" {
		w.t.Errorf("a log line under KeyHashed quotes the raw key %q: %s", k, line)
	}
	w.t.Log(line)
	return len(p), nil
}
