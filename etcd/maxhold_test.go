package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// TestMaxHoldFixedTTL: etcd keeps a lease's TTL as granted, in whole
// seconds, so the last renewals of a domain with a max_hold, which ask for
// only what reaches the cap, are refused (a TTL other than the lease's) or
// not sent (less than the server's minimum). The lease ends at its last
// deadline before the cap, up to a TTL early, reported as its max hold, and
// never after the cap.
func TestMaxHoldFixedTTL(t *testing.T) {
	t.Parallel() // idle: it holds a lease to its cap
	c := testserver.StartEtcd(t, 1)
	// A TTL above the server's minimum (2s): a shortened one can be asked.
	const (
		ttl     = 3 * time.Second
		maxHold = 7 * time.Second
	)
	p := lockkit.Policy{TTL: ttl, MaxHold: maxHold}
	var (
		start, ended time.Time
		cause        error
	)
	start = time.Now()
	err := lockOf(newClient(t, c), "maxhold", p, "x").Do(ctxT(t, 30*time.Second), func(ctx context.Context, _ *lockkit.Lease) error {
		<-ctx.Done()
		ended, cause = time.Now(), context.Cause(ctx)
		return nil
	})
	held := ended.Sub(start)
	t.Logf("fn's ctx ended %v after the call (max_hold %v, ttl %v): %v; Do: %v", held.Round(time.Millisecond), maxHold, ttl, cause, err)
	if held > maxHold {
		t.Errorf("held %v, past max_hold %v", held, maxHold)
	}
	if held < maxHold-ttl-time.Second {
		t.Errorf("held %v: lost more than a TTL before max_hold %v", held, maxHold)
	}
	if !errors.Is(cause, lockkit.ErrLockLost) || !strings.Contains(cause.Error(), "max hold") {
		t.Errorf("cause %v; want the max hold", cause)
	}
}
