package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/etcdkey"
)

// The store's own check, below the backend's record of tokens: a release
// carrying a stale acquisition's record (its key's name, lease and create
// revision; or, its revision unknown, its lease and value) does not delete a
// later acquisition that wrote the same name on the same recycled lease.
func TestDeleteOwnNotByName(t *testing.T) {
	cli := testClient(t)
	be, err := New(cli).Open(driver.Config{CommandTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	b := be.(*backend)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := func(tok string) *driver.Request {
		return &driver.Request{Key: "d", Token: tok, TTL: 2 * time.Second, Fencing: true, Holder: "h"}
	}
	if _, err := b.Acquire(ctx, req("A")); err != nil {
		t.Fatal(err)
	}
	staleA := *b.lookup("d", "A")
	if held, err := b.Release(ctx, "d", "A"); err != nil || !held {
		t.Fatalf("release A: %v %v", held, err)
	}
	fB, err := b.Acquire(ctx, req("B"))
	if err != nil {
		t.Fatal(err)
	}
	if a := b.lookup("d", "B"); a.key != staleA.key || a.lease != staleA.lease {
		t.Fatalf("B on %q lease %x, want A's name %q on its recycled lease %x", a.key, a.lease, staleA.key, staleA.lease)
	}
	unknownA := staleA
	unknownA.rev, unknownA.val = 0, etcdkey.Value("A", "h")
	for name, stale := range map[string]acq{"by create revision": staleA, "by lease and value": unknownA} {
		if held, err := b.deleteOwn(ctx, "A", &stale); err != nil || held {
			t.Errorf("stale delete %s: held %v, %v", name, held, err)
		}
		r, err := cli.Get(ctx, staleA.key)
		if err != nil || len(r.Kvs) != 1 || r.Kvs[0].CreateRevision != fB {
			t.Fatalf("after a stale delete %s, B's key: %v %v, want its create revision %d", name, r, err, fB)
		}
	}
}
