package lockkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// downBound is how long past the command timeout a call on a stopped Redis
// may take: generous for a loaded 2-core machine, well below the history
// (1.71s for one TryDo at a 500ms command timeout).
const downBound = 400 * time.Millisecond

// Redis down (connection refused), with the clients users build: the
// README's, and a bare one. A TryDo fails with ErrUnavailable within the
// command timeout (go-redis's pool retries the dial 5 times, 100ms apart, and
// lockkit's hot-path ctx must end that loop), also once the pool has stopped
// dialing; Ping names the real cause; and the first request after the
// restart succeeds at once.
func TestRedisDownRefused(t *testing.T) {
	const cmdTimeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"README", func(addr string) *redis.Options { return &redis.Options{Addr: addr, ContextTimeoutEnabled: true} }},
		{"bare", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testserver.StartRedis(t)
			rdb := redis.NewClient(tc.opts(r.Addr()))
			t.Cleanup(func() { rdb.Close() })
			c := newClientOver(t, rdb, WithCommandTimeout(cmdTimeout))
			d := testDomain(t, c, Policy{TTL: 10 * time.Second})
			noop := func(context.Context, *Lease) error { return nil }
			if err := lockOn(d, "warm").TryDo(t.Context(), noop); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			r.Stop(t)
			// More calls than the pool has connections: go-redis stops
			// dialing after PoolSize failed dials and probes once a second.
			n := rdb.Options().PoolSize + 5
			var worst time.Duration
			for i := range n {
				start := time.Now()
				err := lockOn(d, "down").TryDo(t.Context(), noop)
				took := time.Since(start)
				worst = max(worst, took)
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("TryDo %d on a stopped Redis = %v, want ErrUnavailable", i, err)
				}
				if i == 0 {
					t.Logf("first TryDo on a stopped Redis: %v after %v", err, took.Round(time.Millisecond))
				}
			}
			t.Logf("slowest of %d TryDo on a stopped Redis: %v (command timeout %v)", n, worst.Round(time.Millisecond), cmdTimeout)
			if worst > cmdTimeout+downBound {
				t.Errorf("a TryDo on a stopped Redis took %v, want at most %v + %v", worst, cmdTimeout, downBound)
			}
			start := time.Now()
			err := c.Ping(t.Context())
			t.Logf("Ping on a stopped Redis: %v after %v", err, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("Ping on a stopped Redis = %v, want ErrUnavailable naming \"connection refused\"", err)
			}
			r.Restart(t)
			// The breaker opened while Redis was down: until its open
			// window ends, calls fail at once with ErrUnavailable (by
			// design, docs/semantics.md). Once it has, the first request,
			// as a service makes it (Do, with the domain's retries), must
			// succeed without a stall (the history: 5.37s, "gave up after 3
			// attempts").
			time.Sleep(circuit.DefaultOpenTimeout + 100*time.Millisecond)
			start = time.Now()
			err = lockOn(d, "back").Do(t.Context(), noop)
			took := time.Since(start)
			t.Logf("first Do after the restart: %v after %v", err, took.Round(time.Millisecond))
			if err != nil {
				t.Errorf("first Do after the restart = %v, want nil", err)
			}
			if took > cmdTimeout+downBound {
				t.Errorf("first Do after the restart took %v, want at most %v + %v", took, cmdTimeout, downBound)
			}
		})
	}
}
