package lockkit

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestRenewalUnderSlowExtendsKeepsLease (issue #35, "renewal under a slow
// client"): every reply from Redis is delayed by 700ms (a toxiproxy latency
// on the client's connections), a large share of the 2s TTL but within the
// 1s command timeout, so every extend succeeds. Renewing only every TTL/3
// after the previous answer sends the first renewal 1367ms after the
// acquire was sent; answered 700ms later it lands after the local deadline
// (1978ms), which cancels it, and the lease is lost with Redis healthy.
// Renewal must be sent early enough that an answer within the command
// timeout lands before the deadline: the lease is held for 6s (three TTLs)
// and is still valid, and the key still holds its token.
func TestRenewalUnderSlowExtendsKeepsLease(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	proxy := startToxiproxy(t, r.Addr())
	// The README's client configuration, through the proxy.
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Listen, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := newClientOver(t, rdb, WithCommandTimeout(time.Second))
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	l := lockOn(d, "slow")

	// Warm the pool and the script cache before the latency: a dial's
	// handshake or a NOSCRIPT round trip would add replies of 700ms each.
	warmPool(t, rdb, 4)
	ctx := t.Context()
	warm, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const latency = 700 * time.Millisecond
	addLatency(t, proxy, "slow-replies", latency)
	start := time.Now()
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquire took %v (latency %v, ttl %v, command timeout %v)", time.Since(start).Round(time.Millisecond), latency, d.policy.TTL, c.cmdTimeout)
	const hold = 6 * time.Second
	select {
	case <-lease.Done():
		t.Errorf("lease lost after %v of %v held: %v", time.Since(start).Round(time.Millisecond), hold, lease.Err())
	case <-time.After(hold):
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("after %v: %v", hold, err)
	}
	if got, err := admin.Get(context.Background(), l.key).Result(); err != nil || !strings.HasPrefix(got, lease.Token()) {
		t.Errorf("key holds %q (%v), want the lease's token", got, err)
	}
	removeToxic(t, proxy, "slow-replies")
	if err := lease.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}

// TestRenewMarginWarning (issue #35): a domain whose TTL leaves less than
// two command timeouts between a renewal and the local deadline
// (policy.CheckRenewMargin) is warned about once through the client's
// logger, however often it is bound, and still works; a domain with room,
// and one that never renews, are not.
func TestRenewMarginWarning(t *testing.T) {
	r := testserver.StartRedis(t)
	const msg = "less than two command timeouts"
	for _, c := range []struct {
		name   string
		policy Policy
		warns  int
		advice string
	}{
		{"ttl 1s, renew ttl/3", Policy{TTL: time.Second}, 1, "ttl of at least 1.6s"},
		// 888ms: a renewal at 100ms that times out at 600ms, then a retry
		// answered within 500ms, lands after the deadline at 988ms.
		{"ttl 1s, renew 100ms", Policy{TTL: time.Second, Renew: 100 * time.Millisecond}, 1, "ttl of at least 1.2s"},
		{"ttl 1.2s, renew 100ms", Policy{TTL: 1200 * time.Millisecond, Renew: 100 * time.Millisecond}, 0, ""}, // 1086ms
		{"ttl 2s", Policy{TTL: 2 * time.Second}, 0, ""},
		{"ttl 1s, never renewed", Policy{TTL: time.Second, Renew: -1}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			cl, err := New(goredis.New(r.Client(t)), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close(t.Context())
			for range 3 { // bound three times: warned once
				if d := cl.Domain(DomainSpec{Name: "report", Policy: c.policy}); d.Err() != nil {
					t.Fatal(d.Err())
				}
			}
			if got := strings.Count(logs.String(), msg); got != c.warns {
				t.Fatalf("%d warnings, want %d:\n%s", got, c.warns, logs.String())
			}
			if c.warns > 0 && (!strings.Contains(logs.String(), "domain=report") || !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), c.advice)) {
				t.Errorf("the warning names no domain, level or advice:\n%s", logs.String())
			}
		})
	}
}
