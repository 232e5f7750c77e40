package etcd_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/etcdkey"
	"github.com/lockkit/lockkit/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An acquisition's key is named after its lease: a released lease, kept as a
// spare, carries the next acquisition's key under the same name. The fence
// (the create revision) still rises with each acquisition, and a stale
// release or extend of the first acquisition, whose name the second one
// wrote again, changes nothing.
func TestReusedNameStale(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	other := openBackend(t, cli) // a second process: remembers nothing
	ctx := ctxT(t, 20*time.Second)
	req := func(tok string) *driver.Request {
		return &driver.Request{Key: "n", Token: tok, TTL: ttl, Fencing: true, Holder: "h=" + tok}
	}
	fA, err := be.Acquire(ctx, req("A"))
	if err != nil {
		t.Fatal(err)
	}
	kvA := kvOf(t, cli, "n", "A")
	if want := etcdkey.Name("n", kvA.Lease); string(kvA.Key) != want || kvA.CreateRevision != fA {
		t.Fatalf("A's key %q rev %d, want %q rev %d (named after its lease, the fence its create revision)", kvA.Key, kvA.CreateRevision, want, fA)
	}
	if held, err := be.Release(ctx, "n", "A"); err != nil || !held {
		t.Fatalf("release A: %v %v", held, err)
	}
	fence, past := fA, []string{"A"}
	for _, tok := range []string{"B", "C"} {
		f, err := be.Acquire(ctx, req(tok))
		if err != nil {
			t.Fatal(err)
		}
		kv := kvOf(t, cli, "n", tok)
		if !bytes.Equal(kv.Key, kvA.Key) || kv.Lease != kvA.Lease {
			t.Fatalf("%s's key %q on lease %x, want A's name %q on the recycled lease %x", tok, kv.Key, kv.Lease, kvA.Key, kvA.Lease)
		}
		if f <= fence || f != kv.CreateRevision {
			t.Fatalf("%s's fence %d (create revision %d) after %d: not strictly increasing under a repeated name", tok, f, kv.CreateRevision, fence)
		}
		fence = f
		// The earlier acquisitions' tokens, from this process and another.
		for _, b := range []driver.Backend{be, other} {
			for _, stale := range past {
				if held, err := b.Release(ctx, "n", stale); err != nil || held {
					t.Errorf("stale release of %s while %s holds the same name: held %v, %v", stale, tok, held, err)
				}
				if held, err := b.Extend(ctx, "n", stale, ttl); err != nil || held {
					t.Errorf("stale extend of %s while %s holds the same name: held %v, %v", stale, tok, held, err)
				}
			}
		}
		now := kvOf(t, cli, "n", tok)
		if now.CreateRevision != f || now.ModRevision != kv.ModRevision || len(kvsOf(t, cli, "n")) != 1 {
			t.Fatalf("%s's key was touched by a stale release or extend: %v, was %v", tok, now, kv)
		}
		h, held, err := be.(driver.HolderReader).ReadHolder(ctx, "n")
		if err != nil || !held || h.Token != tok || h.Holder != "h="+tok || h.Fence != f {
			t.Fatalf("holder: %+v %v %v, want %s with fence %d", h, held, err, tok, f)
		}
		if held, err := be.Release(ctx, "n", tok); err != nil || !held {
			t.Fatalf("release %s: %v %v", tok, held, err)
		}
		past = append(past, tok)
	}
}

// A key named after its token (earlier builds: lock key, NUL, token; the
// value the holder description alone) and a lease-named one exclude each
// other: both sides take the lowest create revision in the lock's range as
// the holder. The reader takes an old key's token from its name.
func TestMixedKeyFormats(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	q := be.(driver.Queue)
	hr := be.(driver.HolderReader)
	ctx := ctxT(t, 20*time.Second)
	const key = "mixed"
	start, end := etcdkey.Range(key)
	// oldAcquire is an earlier build's polling acquire, sent as it sent it.
	oldAcquire := func(tok string) (bool, int64) {
		t.Helper()
		g, err := cli.Grant(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(start).WithRange(end), "=", 0)).
			Then(clientv3.OpPut(key+"\x00"+tok, "h=old-"+tok, clientv3.WithLease(g.ID))).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r.Succeeded, r.Header.Revision
	}
	ok, oldRev := oldAcquire("OLDA")
	if !ok {
		t.Fatal("the old-format acquire on a free lock failed")
	}
	if _, err := be.Acquire(ctx, &driver.Request{Key: key, Token: "N1", TTL: ttl, Fencing: true}); !errors.Is(err, driver.ErrContended) {
		t.Fatalf("acquire beside an old-format holder: %v, want ErrContended", err)
	}
	if h, held, err := hr.ReadHolder(ctx, key); err != nil || !held || h.Token != "OLDA" || h.Holder != "h=old-OLDA" || h.Fence != oldRev {
		t.Fatalf("holder: %+v %v %v, want OLDA (from its name) at %d", h, held, err, oldRev)
	}
	// A FIFO waiter queues behind it, and is granted once it is gone.
	r, err := q.QueueAcquire(ctx, &driver.Request{Key: key, Token: "Q1", TTL: ttl, Fencing: true})
	if err != nil || r.Granted || r.Position != 2 {
		t.Fatalf("queue join behind an old-format holder: %+v %v, want position 2", r, err)
	}
	if _, err := cli.Delete(ctx, key+"\x00OLDA"); err != nil { // the old build's release
		t.Fatal(err)
	}
	r, err = q.QueueAcquire(ctx, &driver.Request{Key: key, Token: "Q1", TTL: ttl, Fencing: true})
	if err != nil || !r.Granted || r.Fence <= oldRev {
		t.Fatalf("queue waiter after the old holder left: %+v %v, want granted above fence %d", r, err, oldRev)
	}
	// An old build's acquire beside a lease-named holder is refused, and
	// its FIFO waiter (a key written always) queues behind it.
	if ok, _ := oldAcquire("OLDB"); ok {
		t.Fatal("an old-format acquire was granted beside a lease-named holder")
	}
	if _, err := cli.Put(ctx, key+"\x00OLDW", "h=old-OLDW"); err != nil {
		t.Fatal(err)
	}
	if h, held, err := hr.ReadHolder(ctx, key); err != nil || !held || h.Token != "Q1" || h.Fence != r.Fence {
		t.Fatalf("holder: %+v %v %v, want Q1 at %d", h, held, err, r.Fence)
	}
	if held, err := q.QueueRelease(ctx, key, "Q1", ""); err != nil || !held {
		t.Fatalf("release Q1: %v %v", held, err)
	}
	if h, held, err := hr.ReadHolder(ctx, key); err != nil || !held || h.Token != "OLDW" {
		t.Fatalf("holder after Q1: %+v %v %v, want the old-format waiter OLDW", h, held, err)
	}
	if _, err := be.Acquire(ctx, &driver.Request{Key: key, Token: "N2", TTL: ttl}); !errors.Is(err, driver.ErrContended) {
		t.Fatalf("acquire while the old-format waiter holds: %v, want ErrContended", err)
	}
}
