package goredis

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// warnings records what a backend warned about.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) warn(msg string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, fmt.Sprint(append([]any{msg}, args...)...))
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// TestServerCheckWarnings (issue #26): the Redis backend's server check
// warns once about an eviction policy that can delete a held lock's key (allkeys-* and volatile-*: every lock key has a TTL),
// and says so when CONFIG is disabled and the policy cannot be read; the
// default policy (noeviction) draws no warning.
func TestServerCheckWarnings(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string // "" for no warning
	}{
		{"noeviction", nil, ""},
		{"allkeys-lru", []string{"--maxmemory-policy", "allkeys-lru"}, "maxmemory-policy is allkeys-lru"},
		{"volatile-ttl", []string{"--maxmemory-policy", "volatile-ttl"}, "maxmemory-policy is volatile-ttl"},
		{"CONFIG disabled", []string{"--rename-command", "CONFIG", ""}, "could not read the server's maxmemory-policy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := testserver.StartRedis(t, testserver.WithArgs(c.args...))
			var w warnings
			select {
			case <-checkServers(r.Client(t), driver.Config{CommandTimeout: 500 * time.Millisecond, Warn: w.warn}):
			case <-time.After(2 * serverCheckTimeout):
				t.Fatalf("the server check did not end within %v", 2*serverCheckTimeout)
			}
			got := w.all()
			if c.want == "" {
				if got != "" {
					t.Errorf("want no warning, got:\n%s", got)
				}
				return
			}
			if strings.Count(got, "\n") != 0 || !strings.Contains(got, c.want) || !strings.Contains(got, r.Addr()) {
				t.Errorf("want one warning containing %q and the node %s, got:\n%s", c.want, r.Addr(), got)
			}
		})
	}
}

// TestServerCheckServerDown: a stopped server draws no warning (the lock
// calls say it is down), and the check ends at once: its first dial is
// refused.
func TestServerCheckServerDown(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	r.Stop(t)
	var w warnings
	select {
	case <-checkServers(rdb, driver.Config{CommandTimeout: 500 * time.Millisecond, Warn: w.warn}):
	case <-time.After(serverCheckTimeout):
		t.Fatalf("the check on a stopped server did not end within %v", serverCheckTimeout)
	}
	if got := w.all(); got != "" {
		t.Errorf("a stopped server drew: %s", got)
	}
}

// TestServerCheckWarningsThroughNew: the check runs at New, in the
// background, and its warning reaches the Client's logger.
func TestServerCheckWarningsThroughNew(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithArgs("--maxmemory-policy", "allkeys-lru"))
	var w warnings
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) { w.warn(string(p)) }), nil))
	_ = newClient(t, r, lockkit.WithLogger(logger))
	for deadline := time.Now().Add(2 * serverCheckTimeout); ; time.Sleep(20 * time.Millisecond) {
		got := w.all()
		if strings.Contains(got, "maxmemory-policy is allkeys-lru") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no eviction warning in the client's log:\n%s", got)
		}
	}
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// TestVersionWarning: a Redis older than the README's minimum is warned
// about; the minimum and newer ones, and a version that cannot be read,
// are not; the README states the same minimum as minRedisVersion.
func TestVersionWarning(t *testing.T) {
	for v, warn := range map[string]bool{"6.2.14": true, "5.0.7": true, "7.0.15": false, "7.2.4": false, "8.0.0": false, "": false, "x.y": false} {
		if got := versionWarning(v); (got != "") != warn {
			t.Errorf("versionWarning(%q) = %q, want a warning: %v", v, got, warn)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("| Redis | %d.%d |", minRedisVersion[0], minRedisVersion[1]); !strings.Contains(string(readme), want) {
		t.Errorf("README.md's requirements do not state %q", want)
	}
	r := testserver.StartRedis(t)
	var w warnings
	<-checkServers(r.Client(t), driver.Config{CommandTimeout: 500 * time.Millisecond, Warn: w.warn})
	if got := w.all(); got != "" {
		t.Errorf("the test server (7.0) drew: %s", got)
	}
}
