package lockkit

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// lineLog collects lines (a go-redis logger's stderr, a Client's slog
// output) to count them.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) add(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }

func (l *lineLog) Write(p []byte) (int, error) { l.add(string(p)); return len(p), nil }

func (l *lineLog) count(sub ...string) (n int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
line:
	for _, s := range l.lines {
		for _, x := range sub {
			if !strings.Contains(s, x) {
				continue line
			}
		}
		if n++; n == 1 {
			first = strings.TrimSpace(s)
		}
	}
	return n, first
}

// goRedisLogger is what redis.SetLogger takes.
type goRedisLogger interface {
	Printf(ctx context.Context, format string, v ...any)
}

// goRedisStderr installs, as go-redis's process-wide logger, the one build
// builds while os.Stderr is a pipe, and collects what it writes to stderr.
// The test's end puts back go-redis's default logger (no test sets another).
func goRedisStderr(t *testing.T, build func() goRedisLogger) *lineLog {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	redis.SetLogger(build())
	os.Stderr = stderr
	out := &lineLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out.add(sc.Text())
		}
	}()
	t.Cleanup(func() {
		logging.Enable()
		w.Close()
		<-done
		r.Close()
	})
	return out
}

// Redis down (issue 26): go-redis writes "connection pool: failed to dial"
// to its process-wide logger (stderr by default), one line per failed dial.
// go-redis stops dialing, so logging, once PoolSize dials in a row have
// failed (it then probes once a second, silently): the lines come in one
// burst per outage, however long it lasts. lockkit does not replace that
// logger (it is the process's, and go-redis offers no way to read it and
// pass lines on); it names the outage in the Client's own log, once per
// breaker opening (at most one per OpenTimeout and node), with the cause.
// The documented opt-in (docs/deployments.md, "Redis down") drops
// go-redis's lines.
func TestRedisDownLogLines(t *testing.T) {
	const (
		workers = 4
		down    = 3 * time.Second
	)
	for _, tc := range []struct {
		name   string
		logger func() goRedisLogger
	}{
		{"go-redis default", func() goRedisLogger { logging.Enable(); return nil }},
		{"opt-in filter", func() goRedisLogger { return logging.NewBlacklistLogger([]string{"failed to dial"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := goRedisStderr(t, tc.logger)
			r := testserver.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			own := &lineLog{}
			c := newClientOver(t, rdb, WithLogger(slog.New(slog.NewTextHandler(own, nil))))
			d := testDomain(t, c, Policy{TTL: 2 * time.Second})
			noop := func(context.Context, *Lease) error { return nil }
			if err := lockOn(d, "warm").TryDo(t.Context(), noop); err != nil {
				t.Fatal(err)
			}
			r.Stop(t)
			end := time.Now().Add(down)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(end); i++ {
						_ = lockOn(d, strconv.Itoa(w)+"-"+strconv.Itoa(i)).TryDo(t.Context(), noop)
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			time.Sleep(700 * time.Millisecond) // dials go-redis still runs on its own
			rawN, rawFirst := raw.count("failed to dial", r.Addr())
			opened, openLine := own.count("circuit breaker state changed", "to=open", "error=")
			t.Logf("%v down, %d workers: %d go-redis lines on stderr (PoolSize %d), e.g. %q; %d breaker openings in the Client's log, e.g. %q",
				down, workers, rawN, rdb.Options().PoolSize, rawFirst, opened, openLine)
			if opened == 0 {
				t.Errorf("the Client's log names no cause of the outage:\n%s", strings.Join(own.lines, ""))
			}
			if tc.name == "opt-in filter" {
				if rawN != 0 {
					t.Errorf("with the opt-in filter, %d go-redis dial lines reached stderr, want 0", rawN)
				}
				return
			}
			if rawN == 0 {
				t.Fatal("no go-redis dial line on stderr: the test does not see what users see")
			}
			// go-redis stops dialing (and logging) once PoolSize dials in
			// a row have failed; dials already under way then still log:
			// each worker's acquisition and the release that follows an
			// acquisition whose outcome is unknown.
			if bound := rdb.Options().PoolSize + 2*workers; rawN > bound {
				t.Errorf("%d go-redis dial lines in %v, want at most PoolSize + 2 × workers = %d", rawN, down, bound)
			}
		})
	}
}
