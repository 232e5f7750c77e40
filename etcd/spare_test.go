package etcd_test

import (
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSpareReuseValidity: an acquisition on a spare lease renewed a moment
// ago sends it no keep-alive, so its validity counts from that earlier
// renewal's send: the Client's deadline is no later than the end of the call
// that renewed the lease + TTL − drift (the server counts the TTL from its
// receipt of that renewal, which came before that end). A spare renewed
// longer ago (past a twentieth of the TTL) gets a keep-alive: its deadline
// counts from this acquisition's send, and the server keeps its key at least
// until then.
func TestSpareReuseValidity(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	// The acquires and releases around the deadlines checked are setup: a
	// command timeout of 2s, not the default 500ms, keeps them from failing
	// as unavailable on a loaded machine (a CPU-hog rehearsal of round 23:
	// the first release timed out). No deadline below counts it.
	l := lockOf(newClient(t, c, lockkit.WithCommandTimeout(2*time.Second)), "reuse", lockkit.Policy{TTL: ttl, Renew: -1}, "x")
	ctx := ctxT(t, 20*time.Second)
	drift := ttl/100 + 2*time.Millisecond // internal/policy.Drift
	leaseOf := func() clientv3.LeaseID {
		t.Helper()
		r, err := cli.Get(ctx, l.Key()+"\x00", clientv3.WithRange(l.Key()+"\x01"))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("keys of %s: %v %v, want one", l.Key(), r, err)
		}
		return clientv3.LeaseID(r.Kvs[0].Lease)
	}
	release := func(lease *lockkit.Lease) {
		t.Helper()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	first, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewedBy := time.Now() // the lease's grant was sent before this
	spare := leaseOf()
	release(first) // its lease is kept as a spare, renewed just now

	sent := time.Now()
	second, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(); got != spare {
		t.Fatalf("granted on lease %x, want the spare %x", got, spare)
	}
	if dl, bound := second.Deadline(), renewedBy.Add(ttl-drift); dl.After(bound) {
		t.Errorf("on a spare renewed %v before the acquire, the deadline is %v after the acquire's send, %v past the spare's renewal + TTL − drift: longer than the server is known to keep the lease",
			sent.Sub(renewedBy), dl.Sub(sent), dl.Sub(bound))
	}
	release(second)

	// Past a twentieth of the TTL (and within half of it, as spares are
	// kept), the spare gets a keep-alive with the put. Longer than etcd's
	// 500ms expiry tick, so a lease not renewed would lose its key before
	// a deadline counted from this send.
	time.Sleep(ttl * 3 / 10)
	sent = time.Now()
	//lockkit-vet:ignore test: the lease is left unreleased and unrenewed to watch the server expire its key
	third, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(); got != spare {
		t.Fatalf("granted on lease %x, want the spare %x", got, spare)
	}
	dl := third.Deadline()
	if want := sent.Add(ttl - drift); dl.Before(want) {
		t.Errorf("on a spare renewed %v before the acquire, the deadline is %v after the acquire's send, want TTL − drift %v: it was not kept alive by this acquire",
			ttl*3/10, dl.Sub(sent), ttl-drift)
	}
	// Not renewed (Renew < 0) nor released: the server deletes the key at
	// the lease's expiry, which must not come before the Client's deadline.
	for {
		r, err := cli.Get(ctx, l.Key()+"\x00", clientv3.WithRange(l.Key()+"\x01"), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 {
			if at := time.Now(); at.Before(dl) {
				t.Fatalf("the key expired %v before the holder's deadline", dl.Sub(at))
			}
			break
		}
		if time.Since(sent) > 3*ttl {
			t.Fatalf("the key is still there %v after the acquire (TTL %v)", time.Since(sent), ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
