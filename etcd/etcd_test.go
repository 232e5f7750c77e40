package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/etcdkey"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newCli is a clientv3 client on every member of c, as a user configures one.
func newCli(t testing.TB, c *testserver.EtcdCluster) *clientv3.Client {
	t.Helper()
	return newCliOn(t, c.Endpoints()...)
}

func newCliOn(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// testOptions are the options of every test client: its log lines go to the
// test log, under the run's key mode and scanned for a raw key in a hashed
// run (internal/testlog).
func testOptions(t testing.TB) []lockkit.Option {
	return []lockkit.Option{lockkit.WithLogger(testlog.Logger(t)), lockkit.WithKeyMode(testlog.KeyMode())}
}

// newClient is a lockkit client on its own etcd client, closed with the test.
func newClient(t testing.TB, c *testserver.EtcdCluster, opts ...lockkit.Option) *lockkit.Client {
	t.Helper()
	return newClientWith(t, c.Endpoints(), opts...)
}

func newClientOn(t testing.TB, endpoints ...string) *lockkit.Client {
	t.Helper()
	return newClientWith(t, endpoints)
}

func newClientWith(t testing.TB, endpoints []string, opts ...lockkit.Option) *lockkit.Client {
	t.Helper()
	lc, err := lockkit.New(etcd.New(newCliOn(t, endpoints...)), append(testOptions(t), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close(ctxT(t, 10*time.Second)) })
	return lc
}

// openBackend is the driver of etcd.New, for the tests that act as a paused
// holder (no renewals) or send stale tokens.
func openBackend(t testing.TB, cli *clientv3.Client, opts ...etcd.Option) driver.Backend {
	t.Helper()
	spec := etcd.New(cli, opts...)
	if spec.Err != nil {
		t.Fatal(spec.Err)
	}
	be, err := spec.Open(driver.Config{CommandTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	return be
}

func lockOf(c *lockkit.Client, name string, p lockkit.Policy, id string) lockkit.Lock {
	return c.Domain(lockkit.DomainSpec{Name: name, Policy: p}).Key(32).Literal(name + ":").String(id).Lock()
}

// keysOf lists the etcd keys of lock key key (every holder and waiter).
func keysOf(t testing.TB, cli *clientv3.Client, key string) []string {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 5*time.Second), key+"\x00", clientv3.WithRange(key+"\x01"), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// tokensOf lists the tokens of lock key key's etcd keys, by create
// revision (the holder first).
func tokensOf(t testing.TB, cli *clientv3.Client, key string) []string {
	t.Helper()
	var out []string
	for _, kv := range kvsOf(t, cli, key) {
		tok, _, ok := etcdkey.Parse(key, kv.Key, kv.Value)
		if !ok {
			t.Fatalf("key %q, value %q: not lockkit's layout", kv.Key, kv.Value)
		}
		out = append(out, tok)
	}
	return out
}

// kvsOf lists lock key key's etcd keys and values, by create revision.
func kvsOf(t testing.TB, cli *clientv3.Client, key string) []*mvccpb.KeyValue {
	t.Helper()
	start, end := etcdkey.Range(key)
	resp, err := cli.Get(ctxT(t, 5*time.Second), start, clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs
}

// kvOf is the etcd key of tok's acquisition of key.
func kvOf(t testing.TB, cli *clientv3.Client, key, tok string) *mvccpb.KeyValue {
	t.Helper()
	for _, kv := range kvsOf(t, cli, key) {
		if got, _, _ := etcdkey.Parse(key, kv.Key, kv.Value); got == tok {
			return kv
		}
	}
	t.Fatalf("no key of %s holds token %s", key, tok)
	return nil
}

const ttl = 2 * time.Second

// A contended poll attempt leaves no key behind, and its lease is kept as
// one spare for the next attempts, revoked at Close.
func TestContendedLeavesNothing(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	ctx := ctxT(t, 20*time.Second)
	if _, err := be.Acquire(ctx, &driver.Request{Key: "k", Token: "A", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	leases := func() int {
		r, err := cli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Leases)
	}
	before := leases()
	for i := range 5 {
		if _, err := be.Acquire(ctx, &driver.Request{Key: "k", Token: fmt.Sprint("B", i), TTL: ttl}); !errors.Is(err, driver.ErrContended) {
			t.Fatalf("second acquire: %v, want ErrContended", err)
		}
	}
	if k := tokensOf(t, cli, "k"); len(k) != 1 || k[0] != "A" {
		t.Errorf("keys = %q, want only A's", k)
	}
	// The first attempt's lease is kept as a spare (no key bound to it) and
	// taken again by the next ones: one lease more, not five.
	if n := leases(); n > before+1 {
		t.Errorf("leases: %d after 5 contended attempts, %d before", n, before)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := leases(); n != before {
		t.Errorf("leases after Close: %d, %d before the contended attempts", n, before)
	}
}

// Release and extend with a stale token change nothing, and neither deletes
// by name: a key re-created under an acquisition's own name (another
// create revision) is not this acquisition's.
func TestStaleToken(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	other := openBackend(t, cli) // a second process: remembers nothing
	ctx := ctxT(t, 20*time.Second)
	req := func(tok string) *driver.Request {
		return &driver.Request{Key: "s", Token: tok, TTL: ttl, Fencing: true}
	}
	if _, err := be.Acquire(ctx, req("A")); err != nil {
		t.Fatal(err)
	}
	if held, err := be.Release(ctx, "s", "A"); err != nil || !held {
		t.Fatalf("release A: %v %v", held, err)
	}
	fB, err := be.Acquire(ctx, req("B"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []driver.Backend{be, other} {
		for _, tok := range []string{"A", "never"} {
			if held, err := b.Release(ctx, "s", tok); err != nil || held {
				t.Errorf("release of stale token %s: held %v, %v", tok, held, err)
			}
			if held, err := b.Extend(ctx, "s", tok, ttl); err != nil || held {
				t.Errorf("extend of stale token %s: held %v, %v", tok, held, err)
			}
		}
	}
	if k := tokensOf(t, cli, "s"); len(k) != 1 || k[0] != "B" {
		t.Fatalf("after stale releases: keys %q, want B's", k)
	}
	if held, err := other.Extend(ctx, "s", "B", ttl); err != nil || held {
		t.Errorf("B extended by a process that did not acquire it: held %v, %v", held, err)
	}
	if held, err := be.Extend(ctx, "s", "B", ttl); err != nil || !held {
		t.Errorf("B's own extend: held %v, %v", held, err)
	}

	// B's key deleted and written again by name (as a retried unlock by
	// name would find it): not B's acquisition any more.
	nameB := string(kvOf(t, cli, "s", "B").Key)
	if _, err := cli.Delete(ctx, nameB); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, nameB, "impostor"); err != nil {
		t.Fatal(err)
	}
	if held, err := be.Extend(ctx, "s", "B", ttl); err != nil || held {
		t.Errorf("extend of B after its key was re-created: held %v, %v; want false", held, err)
	}
	if held, err := be.Release(ctx, "s", "B"); err != nil || held {
		t.Errorf("release of B after its key was re-created: held %v, %v; want false", held, err)
	}
	r, err := cli.Get(ctx, nameB)
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "impostor" || r.Kvs[0].CreateRevision <= fB {
		t.Errorf("the re-created key was touched: %v %v", r, err)
	}
}

// FIFO: 16 waiters queued one after another get the lock in that order.
func TestFIFOOrder(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	raw := newCli(t, c)
	p := lockkit.Policy{TTL: ttl, Fencing: true, Wait: "fifo", Retry: lockkit.Retry{Attempts: 2, MaxWait: 60 * time.Second}}
	cl := newClient(t, c)
	l := lockOf(cl, "fifo", p, "x")
	ctx := ctxT(t, 120*time.Second)
	holder, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
		fails = make(chan error, n)
	)
	clients := []*lockkit.Client{cl, newClient(t, c), newClient(t, c), newClient(t, c)}
	for i := range n {
		wg.Go(func() {
			err := lockOf(clients[i%len(clients)], "fifo", p, "x").Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				return nil
			})
			if err != nil {
				fails <- fmt.Errorf("waiter %d: %w", i, err)
			}
		})
		// Queued when its key is there: the next one joins after it.
		for len(keysOf(t, raw, l.Key())) != i+2 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(fails)
	for err := range fails {
		t.Error(err)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("grant order %v, want 0..%d", order, n-1)
		}
	}
}

// A domain whose TTL etcd cannot keep as it is is refused when declared,
// naming the domain, the limit and the fix; one the server raises anyway
// (its election timeout longer than WithMinTTL says) is refused at the
// grant, and the lease given back.
func TestTTLRefusal(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cl := newClient(t, c)
	for _, tc := range []struct {
		ttl  time.Duration
		want []string
	}{
		{time.Second, []string{`"short"`, "under the etcd backend's minimum 2s"}},
		{2500 * time.Millisecond, []string{`"short"`, "not a whole number of the etcd backend's TTL unit 1s", "such as 3s"}},
	} {
		d := cl.Domain(lockkit.DomainSpec{Name: "short", Policy: lockkit.Policy{TTL: tc.ttl}})
		err := d.Err()
		if err == nil {
			t.Errorf("ttl %v: domain accepted", tc.ttl)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ttl %v: %v; want it to say %q", tc.ttl, err, w)
			}
		}
	}
	if spec := etcd.New(newCli(t, c), etcd.WithMinTTL(1500*time.Millisecond)); spec.Err == nil {
		t.Error("WithMinTTL(1.5s) accepted")
	}
	if spec := etcd.New(nil); spec.Err == nil {
		t.Error("nil client accepted")
	}

	// A server with etcd's default timing keeps 2s, and raises 1s.
	slow := testserver.StartEtcd(t, 1, testserver.WithEtcdTiming(100*time.Millisecond, time.Second))
	scli := newCli(t, slow)
	g, err := scli.Grant(ctxT(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != int64(2*time.Second/time.Second) {
		t.Errorf("the server granted %ds for 1s; the default minimum is %v", g.TTL, 2*time.Second)
	}
	be := openBackend(t, scli, etcd.WithMinTTL(time.Second))
	_, err = be.Acquire(ctxT(t, 10*time.Second), &driver.Request{Key: "r", Token: "A", TTL: time.Second})
	if err == nil || !errors.Is(err, driver.ErrFinal) || !strings.Contains(err.Error(), "minimum lease TTL is 2s") {
		t.Errorf("acquire with a TTL the server raises: %v", err)
	}
	if k := keysOf(t, scli, "r"); len(k) != 0 {
		t.Errorf("keys after a refused grant: %q", k)
	}
}

// Lock keys that are prefixes of one another are separate locks, in both
// wait modes; a key with the separator byte is refused.
func TestPrefixKeys(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	q := be.(driver.Queue)
	ctx := ctxT(t, 20*time.Second)
	keys := []string{"p", "p/", "p/x", "p\x01", "p0", "pp"}
	for i, k := range keys {
		if _, err := be.Acquire(ctx, &driver.Request{Key: k, Token: fmt.Sprint("T", i), TTL: ttl}); err != nil {
			t.Errorf("acquire %q: %v", k, err)
		}
		r, err := q.QueueAcquire(ctx, &driver.Request{Key: k + "q", Token: fmt.Sprint("Q", i), TTL: ttl})
		if err != nil || !r.Granted {
			t.Errorf("queue acquire %q: %+v %v", k+"q", r, err)
		}
	}
	for i, k := range keys {
		if got := tokensOf(t, cli, k); len(got) != 1 || got[0] != fmt.Sprint("T", i) {
			t.Errorf("keys of %q: %q", k, got)
		}
		if held, err := be.Release(ctx, k, fmt.Sprint("T", i)); err != nil || !held {
			t.Errorf("release %q: %v %v", k, held, err)
		}
	}
	if _, err := be.Acquire(ctx, &driver.Request{Key: "p\x00x", Token: "N", TTL: ttl}); !errors.Is(err, driver.ErrFinal) {
		t.Errorf("a key with a NUL byte: %v, want a final error", err)
	}
}

// A spare lease revoked behind the backend's back (or expired) is never used:
// the next acquire, whose put on that lease etcd refuses, is granted on a new
// lease that lives; a contended attempt on such a spare answers contended.
func TestRevokedSpare(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	cli := newCli(t, c)
	be := openBackend(t, cli)
	ctx := ctxT(t, 20*time.Second)
	leaseOf := func(tok string) clientv3.LeaseID {
		t.Helper()
		return clientv3.LeaseID(kvOf(t, cli, "r", tok).Lease)
	}
	revoke := func(id clientv3.LeaseID) {
		t.Helper()
		if _, err := cli.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(tok string) error {
		_, err := be.Acquire(ctx, &driver.Request{Key: "r", Token: tok, TTL: ttl, Fencing: true})
		return err
	}
	release := func(tok string) {
		t.Helper()
		if held, err := be.Release(ctx, "r", tok); err != nil || !held {
			t.Fatalf("release %s: %v %v", tok, held, err)
		}
	}
	if err := acquire("A"); err != nil {
		t.Fatal(err)
	}
	dead := leaseOf("A")
	release("A") // its lease is kept as a spare
	revoke(dead)
	if err := acquire("B"); err != nil {
		t.Fatalf("acquire on a revoked spare: %v, want granted on a new lease", err)
	}
	live := leaseOf("B")
	if live == dead {
		t.Fatalf("B granted on the revoked lease %x", dead)
	}
	if r, err := cli.TimeToLive(ctx, live); err != nil || r.TTL <= 0 {
		t.Fatalf("B's lease %x: %v %v, want live", live, r, err)
	}

	// A contended attempt leaves its lease as a spare; revoked, the next
	// contended attempt on it answers contended.
	if err := acquire("C"); !errors.Is(err, driver.ErrContended) {
		t.Fatalf("C: %v, want ErrContended", err)
	}
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range before.Leases {
		if l.ID != live {
			revoke(l.ID) // C's spare
		}
	}
	if err := acquire("D"); !errors.Is(err, driver.ErrContended) {
		t.Fatalf("D on a revoked spare while B holds: %v, want ErrContended", err)
	}
	if k := tokensOf(t, cli, "r"); len(k) != 1 || k[0] != "B" {
		t.Fatalf("keys %q, want only B's", k)
	}
	release("B")
	if err := acquire("E"); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.TimeToLive(ctx, leaseOf("E")); err != nil || r.TTL <= 0 {
		t.Fatalf("E's lease: %v %v, want live", r, err)
	}
}
