package goredis

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/lockkit"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// redlockNodes starts n independent redis-servers, each marked as an
// operator marks a new node (markRedlockNodes).
func redlockNodes(t testing.TB, n int, opts ...testserver.RedisOption) []*testserver.Redis {
	t.Helper()
	nodes := make([]*testserver.Redis, n)
	for i := range nodes {
		nodes[i] = testserver.StartRedis(t, opts...)
	}
	markRedlockNodes(t, nodes...)
	return nodes
}

// markRedlockNodes marks new servers that have never served a lock, so
// that they vote at once instead of after their quarantine of one TTL
// (docs/deployments.md, "A new Redlock node").
func markRedlockNodes(t testing.TB, nodes ...*testserver.Redis) {
	t.Helper()
	for _, n := range nodes {
		if err := rediswire.MarkRedlockNode(context.Background(), n.Client(t)); err != nil {
			t.Fatalf("marking Redlock node %s: %v", n.Addr(), err)
		}
	}
}

// redlockClient is a lockkit client over all of nodes, each through its own
// new go-redis client (its own pool, as another process would have).
func redlockClient(t testing.TB, nodes []*testserver.Redis, opts ...Option) *Client {
	t.Helper()
	c, _ := redlockClientBackend(t, nodes, opts...)
	return c
}

// redlockClientBackend is redlockClient, and the Redlock backend the Client
// opened (the Client does not guard a quorum backend as a whole).
func redlockClientBackend(t testing.TB, nodes []*testserver.Redis, opts ...Option) (*Client, *redlockBackend) {
	t.Helper()
	rdbs := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		rdbs[i] = n.Client(t)
	}
	if tt, ok := t.(*testing.T); ok {
		opts = append(testOptions(tt), opts...)
	}
	spec := Redlock(rdbs...)
	var be *redlockBackend
	open := spec.Open
	spec.Open = func(cfg driver.Config) (driver.Backend, error) {
		b, err := open(cfg)
		be, _ = b.(*redlockBackend)
		return b, err
	}
	c, err := lockkit.New(spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c, be
}

// redlockHolders returns, per node, the token the key holds ("" when absent,
// "<down>" when the node does not answer).
func redlockHolders(t *testing.T, nodes []*testserver.Redis, key string) []string {
	t.Helper()
	out := make([]string, len(nodes))
	for i, n := range nodes {
		rdb := n.Client(t)
		v, err := rdb.Get(t.Context(), key).Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			v = "<down>"
		default:
			v, _, _ = holder.Decode(v) // the token, without the holder description
		}
		out[i] = v
		rdb.Close()
	}
	return out
}

// redlockSettled waits (up to 2s) until no node holds key for anyone but
// the allowed owners: late answers release asynchronously. Nodes in skip
// are not checked.
func redlockSettled(t *testing.T, nodes []*testserver.Redis, key string, skip []int, allowed ...string) {
	t.Helper()
	var h []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h = redlockHolders(t, nodes, key)
		bad := false
		for i, v := range h {
			if v != "" && v != "<down>" && !slices.Contains(skip, i) && !slices.Contains(allowed, v) {
				bad = true
			}
		}
		if !bad {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held by a failed or released attempt: %q", key, h)
		}
	}
}

func countHolding(holders []string, token string) int {
	n := 0
	for _, h := range holders {
		if h == token {
			n++
		}
	}
	return n
}

// New refuses a Redlock set that cannot give a meaningful majority: fewer
// than 3 nodes, an even number, nil nodes, or one server counted twice.
func TestRedlockConfig(t *testing.T) {
	addr := func(port int) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	named := func(a string) redis.UniversalClient {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	a, b, c, d, e := addr(1), addr(2), addr(3), addr(4), addr(5)
	cases := []struct {
		name  string
		first redis.UniversalClient
		more  []redis.UniversalClient
		want  string // "" means New succeeds
	}{
		{"two nodes", a, []redis.UniversalClient{b}, "at least 3 independent nodes, got 2"},
		{"four nodes", a, []redis.UniversalClient{b, c, d}, "an odd number of nodes, got 4"},
		{"nil node", a, []redis.UniversalClient{b, nil}, "node 2 is a nil client"},
		{"same client twice", a, []redis.UniversalClient{b, a}, "nodes 0 and 2 are the same client"},
		{"same address twice", a, []redis.UniversalClient{b, addr(1)}, "nodes 0 and 2 both point at tcp/127.0.0.1:1"},
		// One server under two names still fakes a majority.
		{"localhost and 127.0.0.1", a, []redis.UniversalClient{b, named("localhost:1")}, "nodes 0 and 2 both point at tcp/127.0.0.1:1 (localhost:1)"},
		{"three", a, []redis.UniversalClient{b, c}, ""},
		{"five", a, []redis.UniversalClient{b, c, d, e}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := lockkit.New(Redlock(append([]redis.UniversalClient{tc.first}, tc.more...)...))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got, want := len(cl.Health(t.Context()).Breakers), 1+len(tc.more); got != want {
					t.Fatalf("%d breakers, want one per node (%d)", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Fencing is refused per domain on a Redlock client, with an error that says
// why; non-fencing domains on the same client and fencing domains on a
// single-node client are fine.
func TestRedlockFencingRefused(t *testing.T) {
	nodes := redlockNodes(t, 3)
	c := redlockClient(t, nodes)
	fenced := c.Domain(DomainSpec{Name: "fenced", Policy: Policy{TTL: time.Second, Fencing: true}})
	_, err := fenced.Key(4).Literal("x").Lock().TryAcquire(t.Context())
	if err == nil || !strings.Contains(err.Error(), `domain "fenced": fencing is not available on a Redlock client`) ||
		!strings.Contains(err.Error(), "not guaranteed to exceed") {
		t.Fatalf("fenced domain on Redlock: TryAcquire = %v", err)
	}
	if errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a configuration error must not look like contention or an outage: %v", err)
	}
	for _, n := range nodes {
		keys := slices.DeleteFunc(n.Client(t).Keys(t.Context(), "*").Val(), func(k string) bool { return k == policy.RedlockMarker })
		if len(keys) != 0 {
			t.Fatalf("refused fenced domain wrote %v to %s", keys, n.Addr())
		}
	}
	plain := c.Domain(DomainSpec{Name: "plain", Policy: Policy{TTL: time.Second}})
	lease, err := plain.Key(4).Literal("x").Lock().TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("plain domain on the same Redlock client: %v", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	single := newClient(t, nodes[0])
	if d := single.Domain(DomainSpec{Name: "fenced", Policy: Policy{TTL: time.Second, Fencing: true}}); d.Err() != nil {
		t.Fatalf("fencing on a single-node client: %v", d.Err())
	}
}

// Five nodes, all up: a lease lives on all five; contention is
// ErrNotAcquired; extend and release work on all five.
func TestRedlockFiveNodes(t *testing.T) {
	nodes := redlockNodes(t, 5)
	policy := Policy{TTL: 5 * time.Second, Renew: -1}
	a := lockOn(testDomain(t, redlockClient(t, nodes), policy), "k")
	b := lockOn(testDomain(t, redlockClient(t, nodes), policy), "k")
	la, err := a.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Granted once 3 nodes took it; the other two follow at once.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n := countHolding(redlockHolders(t, nodes, a.Key()), la.Token())
		if n == 5 {
			break
		}
		if n < 3 || time.Now().After(deadline) {
			t.Fatalf("lease held on %d of 5 nodes, want 5", n)
		}
	}
	if _, err := b.TryAcquire(t.Context()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("contender: %v, want ErrNotAcquired", err)
	}
	if err := la.Extend(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	redlockSettled(t, nodes, a.Key(), nil)
	lb, err := b.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("contender after release: %v", err)
	}
	//lockkit-vet:ignore test: the release outcome is not what this test checks
	lb.Release(t.Context())
}

// Two of five nodes killed: locks are still granted (3 is a majority), the
// killed nodes show in the per-node outcomes, and mutual exclusion holds
// among 3 clients × 4 goroutines.
func TestRedlockTwoKilled(t *testing.T) {
	nodes := redlockNodes(t, 5)
	nodes[1].Kill(t)
	nodes[3].Kill(t)
	policy := Policy{TTL: 2 * time.Second, Retry: Retry{Attempts: 10000, Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2, Jitter: 0.5, MaxWait: 15 * time.Second}}

	c, be := redlockClientBackend(t, nodes)
	d := testDomain(t, c, policy)
	l := lockOn(d, "shared")
	// The per-node outcomes the acquire span gets.
	token := "probe-token"
	_, outs, err := be.acquireNodes(t.Context(), &driver.Request{Key: l.Key(), Token: token, TTL: d.Policy().TTL})
	if err != nil {
		t.Fatalf("acquire with 2 of 5 killed: %v (%v)", err, outs)
	}
	t.Logf("per-node outcomes: %v", outs)
	for i, o := range outs {
		if o.Node != nodes[i].Addr() {
			t.Fatalf("outcome %d is for %s, want %s", i, o.Node, nodes[i].Addr())
		}
		want := nodeOK
		if i == 1 || i == 3 {
			want = nodeFailed
		}
		// A node that had not answered when the majority was reached may
		// still be pending.
		if o.Result != want && !(o.Result == nodePending && want == nodeFailed) {
			t.Fatalf("node %d: %v, want %v", i, o, want)
		}
	}
	if _, err := be.Release(t.Context(), l.Key(), token); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping with 3 of 5 up: %v", err)
	}

	const clients, goroutines, perG = 3, 4, 10
	var sections overlap
	var done atomic.Int32
	counter := nodes[0].Client(t)
	counterKey := t.Name() + ":counter"
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for ci := range clients {
		cl := c
		if ci > 0 {
			cl = redlockClient(t, nodes)
		}
		l := lockOn(testDomain(t, cl, policy), "shared")
		for range goroutines {
			wg.Go(func() {
				for range perG {
					err := l.Do(t.Context(), func(ctx context.Context, _ *Lease) error {
						defer sections.enter()()
						return incrNonAtomic(ctx, counter, counterKey, time.Millisecond) // the pause widens the window
					})
					if err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := counter.Get(t.Context(), counterKey).Int()
	if err != nil {
		t.Fatal(err)
	}
	if want := clients * goroutines * perG; got != want || int(done.Load()) != want {
		t.Fatalf("counter = %d, sections done = %d, want %d: critical sections overlapped", got, done.Load(), want)
	}
	if m := sections.Max(); m != 1 {
		t.Fatalf("%d goroutines were in the critical section at once", m)
	}
}

// Three of five nodes killed: every acquisition is ErrUnavailable, never
// ErrNotAcquired, and nothing is granted or left behind on the two live
// nodes. Once the breakers of the dead nodes are open the refusal is
// immediate. Ping fails.
func TestRedlockThreeKilled(t *testing.T) {
	nodes := redlockNodes(t, 5)
	for _, i := range []int{0, 2, 4} {
		nodes[i].Kill(t)
	}
	policy := Policy{TTL: 2 * time.Second, Retry: Retry{Attempts: 3, Initial: 5 * time.Millisecond}}
	c := redlockClient(t, nodes)
	l := lockOn(testDomain(t, c, policy), "x")
	for i := range 8 {
		retry := i%2 == 1
		acquire := l.TryAcquire
		if retry {
			acquire = l.Acquire
		}
		lease, err := acquire(t.Context())
		if lease != nil || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) {
			t.Fatalf("attempt %d (retry %v): lease %v, err %v; want ErrUnavailable only", i, retry, lease, err)
		}
		if !strings.Contains(err.Error(), "redlock acquire: no majority: ") || !strings.Contains(err.Error(), "of 5 nodes answered, 3 needed") {
			t.Fatalf("attempt %d: error does not explain the missing majority: %v", i, err)
		}
	}
	// By now each dead node failed 5 times in a row: its breaker is open and
	// the error matches breaker.ErrOpen, so the acquire loop fails fast.
	start := time.Now()
	_, err := l.Acquire(t.Context())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("with the dead nodes' breakers open: %v, want ErrUnavailable matching breaker.ErrOpen", err)
	}
	if el := time.Since(start); el > 200*time.Millisecond {
		t.Fatalf("refusal with open breakers took %v", el)
	}
	t.Logf("error: %v", err)
	redlockSettled(t, nodes, l.Key(), nil)
	if err := c.Ping(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ping with 2 of 5 up: %v", err)
	}
}

// How a failed attempt is classified, from what the nodes said: a majority
// that answered with the lock held somewhere is contention; fewer than a
// majority answering is unavailability. Other owners' keys are planted
// directly.
func TestRedlockOutcomeRule(t *testing.T) {
	nodes := redlockNodes(t, 5)
	rdbs := make([]*redis.Client, 5)
	for i, n := range nodes {
		rdbs[i] = n.Client(t)
	}
	c := redlockClient(t, nodes)
	d := testDomain(t, c, Policy{TTL: 5 * time.Second})
	cases := []struct {
		held, dead []int
		want       error // nil: granted
	}{
		{held: []int{0, 1}, want: nil},                               // 3 ok, 2 held
		{held: []int{0, 1, 2}, want: ErrNotAcquired},                 // 2 ok, 3 held
		{held: []int{0, 1}, dead: []int{4}, want: ErrNotAcquired},    // 2 ok, 2 held: 4 answered
		{held: []int{0}, dead: []int{3, 4}, want: ErrNotAcquired},    // 2 ok, 1 held: 3 answered
		{dead: []int{3, 4}, want: nil},                               // 3 ok
		{dead: []int{2, 3, 4}, want: ErrUnavailable},                 // 2 ok: 2 answered
		{held: []int{0}, dead: []int{2, 3, 4}, want: ErrUnavailable}, // 1 ok, 1 held: 2 answered
	}
	for ci, tc := range cases {
		l := lockOn(d, "case"+strconv.Itoa(ci))
		for _, i := range tc.held {
			rdbs[i].Set(t.Context(), l.Key(), "other-owner", 5*time.Second)
		}
		for _, i := range tc.dead {
			nodes[i].Pause(t)
		}
		// Paused nodes time out: give them a short command timeout.
		cc := redlockClient(t, nodes, WithCommandTimeout(100*time.Millisecond))
		lc := lockOn(testDomain(t, cc, Policy{TTL: 5 * time.Second}), "case"+strconv.Itoa(ci))
		lease, err := lc.TryAcquire(t.Context())
		for _, i := range tc.dead {
			nodes[i].Resume(t)
		}
		switch {
		case tc.want == nil && err != nil:
			t.Fatalf("case %d (held on %v, down %v): %v, want granted", ci, tc.held, tc.dead, err)
		case tc.want != nil && (!errors.Is(err, tc.want) || lease != nil):
			t.Fatalf("case %d (held on %v, down %v): %v, want %v", ci, tc.held, tc.dead, err, tc.want)
		case tc.want == ErrNotAcquired && errors.Is(err, ErrUnavailable), tc.want == ErrUnavailable && errors.Is(err, ErrNotAcquired):
			t.Fatalf("case %d: %v matches both", ci, err)
		}
		if lease != nil {
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			lease.Release(t.Context())
			continue
		}
		// A failed attempt leaves nothing of its own on the nodes that
		// answered. (A paused node runs the acquire it had buffered when it
		// resumes, after the client gave up on it: its key lives until the
		// TTL unless a release happens to reach it later.)
		redlockSettled(t, nodes, l.Key(), tc.dead, "other-owner")
	}
}

// A node that answers late does not hold up the decision, and never keeps
// the key of an attempt that failed or a lease that was released: it
// deletes it as soon as its answer arrives. The slow node is held in DEBUG
// SLEEP, so the acquire reaches it and is run after the decision.
func TestRedlockSlowNodeReleasedAfterAnswer(t *testing.T) {
	nodes := redlockNodes(t, 5)
	const slow = 4
	const sleep = 400 * time.Millisecond
	rdbs := make([]*redis.Client, 5)
	for i, n := range nodes {
		rdbs[i] = n.Client(t)
	}
	c, be := redlockClientBackend(t, nodes, WithCommandTimeout(2*time.Second))
	d := testDomain(t, c, Policy{TTL: 10 * time.Second, Renew: -1})
	stall := func() chan error {
		done := make(chan error, 1)
		go func() {
			done <- rdbs[slow].Do(context.Background(), "debug", "sleep", strconv.FormatFloat(sleep.Seconds(), 'f', 3, 64)).Err()
		}()
		time.Sleep(30 * time.Millisecond) // let the sleep start
		return done
	}
	afterSleep := func(done chan error) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Granted with the slow node pending, then released at once: the slow
	// node runs the acquire after the release reached the others.
	l := lockOn(d, "granted")
	done := stall()
	start := time.Now()
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > sleep/2 {
		t.Fatalf("acquire waited %v for the slow node", el)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	afterSleep(done)
	redlockSettled(t, nodes, l.Key(), nil)

	// Failed (held on 3 nodes), decided without the slow node, whose
	// acquire then succeeds there and is undone.
	l = lockOn(d, "failed")
	for _, i := range []int{0, 1, 2} {
		rdbs[i].Set(t.Context(), l.Key(), "other-owner", 10*time.Second)
	}
	done = stall()
	start = time.Now()
	if _, err := l.TryAcquire(t.Context()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("held on 3 of 5: %v, want ErrNotAcquired", err)
	}
	if el := time.Since(start); el > sleep/2 {
		t.Fatalf("failed attempt waited %v for the slow node", el)
	}
	afterSleep(done)
	redlockSettled(t, nodes, l.Key(), nil, "other-owner")
	var pending int
	be.pending.Range(func(any, any) bool { pending++; return true })
	if pending != 0 {
		t.Fatalf("%d acquisitions still pending after every node answered", pending)
	}
}

// Validity: a lease is granted only if ttl − elapsed − drift > 0 when the
// majority is reached, elapsed counting the slowest node the majority
// needed. With 3 of 5 nodes stalled past the TTL the majority arrives too
// late: ErrUnavailable, no lease. With 2 stalled the other 3 make the
// majority at once and the lease is granted without waiting for them.
func TestRedlockValidity(t *testing.T) {
	nodes := redlockNodes(t, 5)
	const ttl = 250 * time.Millisecond
	const sleep = 600 * time.Millisecond
	c := redlockClient(t, nodes, WithCommandTimeout(time.Second))
	d := testDomain(t, c, Policy{TTL: ttl, Renew: -1})
	// stall stops the nodes (SIGSTOP: stopped when Pause returns, whatever
	// the machine's load) and continues them after sleep; the WaitGroup is
	// done then.
	stall := func(idx ...int) *sync.WaitGroup {
		for _, i := range idx {
			nodes[i].Pause(t)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(sleep)
			for _, i := range idx {
				nodes[i].Resume(t)
			}
		})
		return &wg
	}

	wg := stall(0, 1, 2)
	start := time.Now()
	lease, err := lockOn(d, "late").TryAcquire(t.Context())
	el := time.Since(start)
	wg.Wait()
	if lease != nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "longer than the TTL") {
		t.Fatalf("majority after %v with a %v TTL: granted %v, %v; want ErrUnavailable: acquire took longer than the TTL", el, ttl, lease != nil, err)
	}
	t.Logf("3 of 5 stalled: %v after %v", err, el.Round(time.Millisecond))

	wg = stall(3, 4)
	start = time.Now()
	//lockkit-vet:ignore test: the lease is left to the fault under test or the client's Close
	lease, err = lockOn(d, "fast").TryAcquire(t.Context())
	el = time.Since(start)
	if err != nil {
		t.Fatalf("2 of 5 stalled: %v", err)
	}
	if el > sleep/2 {
		t.Fatalf("2 of 5 stalled: acquire took %v, waiting for the stalled nodes", el)
	}
	if left := time.Until(lease.Deadline()); left <= 0 || left > ttl {
		t.Fatalf("lease deadline in %v, want within (0, %v]", left, ttl)
	}
	wg.Wait()
}

// Extend needs a majority of nodes still holding the lease; release reports
// held when a majority deleted it; with no majority answering, extend is
// ErrUnavailable and the lease stays until its deadline.
// waitAllHolding waits until every node holds key with token: an acquire
// returns once a majority answered, and the rest land after.
func waitAllHolding(t *testing.T, nodes []*testserver.Redis, key, token string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); countHolding(redlockHolders(t, nodes, key), token) < len(nodes); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not every node took the key: %q", redlockHolders(t, nodes, key))
		}
	}
}

func TestRedlockExtendReleaseMajority(t *testing.T) {
	nodes := redlockNodes(t, 5)
	rdbs := make([]*redis.Client, 5)
	for i, n := range nodes {
		rdbs[i] = n.Client(t)
	}
	c := redlockClient(t, nodes, WithCommandTimeout(time.Second)) // no straggler times out on a loaded machine
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Renew: -1})

	l := lockOn(d, "a")
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// TryAcquire returns once a majority answered; let the stragglers land
	// before deleting, or the deletes could leave fewer than three holding.
	waitAllHolding(t, nodes, l.Key(), lease.Token())
	rdbs[0].Del(t.Context(), l.Key())
	rdbs[1].Del(t.Context(), l.Key())
	if err := lease.Extend(t.Context()); err != nil {
		t.Fatalf("extend with 3 of 5 still holding: %v", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("release with 3 of 5 holding: %v", err)
	}

	lease, err = l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// As above; and a straggler landing after the deletes would set the key
	// again.
	waitAllHolding(t, nodes, l.Key(), lease.Token())
	for _, i := range []int{0, 1, 2} {
		rdbs[i].Del(t.Context(), l.Key())
	}
	if err := lease.Extend(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extend with 2 of 5 holding: %v, want ErrNotHeld", err)
	}
	if !errors.Is(lease.Err(), ErrLockLost) {
		t.Fatalf("lease after a refused extend: %v, want ErrLockLost", lease.Err())
	}
	if err := lease.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release with 2 of 5 holding: %v, want ErrNotHeld", err)
	}
	redlockSettled(t, nodes, l.Key(), nil) // the minority's keys were deleted too

	lease, err = l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 2} {
		nodes[i].Pause(t)
	}
	err = lease.Extend(t.Context())
	for _, i := range []int{0, 1, 2} {
		nodes[i].Resume(t)
	}
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("extend with 3 of 5 paused: %v, want ErrUnavailable", err)
	}
	// Every ErrUnavailable from Redlock lists each node's outcome, also when
	// the caller's ctx ends before the nodes answer.
	for _, n := range nodes {
		if !strings.Contains(err.Error(), n.Addr()) {
			t.Errorf("extend with 3 of 5 paused: %v, want it to name node %s", err, n.Addr())
		}
	}
	if lease.Err() != nil {
		t.Fatalf("an unanswered extend lost the lease before its deadline: %v", lease.Err())
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// One Redlock node that restarts without its data cannot help a second
// majority (issue 32). A is granted on a bare majority (the other nodes
// lost A's key, as if A could not reach them); one of A's voting nodes
// restarts empty, or from a snapshot older than A's key; B, a new client,
// tries at once and is refused while A's lease is valid: the restarted node
// is quarantined for one TTL since its first use in its new life. Once
// that TTL has passed (and A's lease with it), B is granted.
func TestRedlockRestartedNodeQuarantined(t *testing.T) {
	const ttl = 2 * time.Second
	policy := Policy{TTL: ttl, Renew: -1}
	run := func(t *testing.T, n int, snapshot bool) {
		nodes := redlockNodes(t, n)
		quorum := n/2 + 1
		restarted := nodes[quorum-1] // one of A's voting nodes
		if snapshot {
			// The node's snapshot holds its marker, not A's key.
			if err := restarted.Client(t).Save(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		a := lockOn(testDomain(t, redlockClient(t, nodes), policy), "k")
		//lockkit-vet:ignore test: the lease runs out on its own (Renew: -1)
		la, err := a.TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, node := range nodes[quorum:] { // A's grant is a bare majority
			if err := node.Client(t).Del(t.Context(), a.Key()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		restarted.Kill(t)
		restarted.Restart(t)
		// B is another process, connecting after the restart.
		b := lockOn(testDomain(t, redlockClient(t, nodes), policy), "k")
		lb, err := b.TryAcquire(t.Context())
		left := time.Until(la.Deadline())
		t.Logf("B at once: %v; A's lease %v left; holders %q", err, left.Round(time.Millisecond), redlockHolders(t, nodes, a.Key()))
		if err == nil {
			if left > 0 {
				t.Fatalf("B was granted while A's lease was valid for %v more (node %s restarted empty)", left, restarted.Addr())
			}
			t.Fatalf("A's lease ran out (%v) before B's first attempt: the machine is too slow for this test's %v TTL", -left, ttl)
		}
		if !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("B at once: %v, want ErrNotAcquired (A holds the key on %d of %d nodes)", err, quorum-1, n)
		}
		// After one TTL B is granted; never before A's lease ran out.
		for deadline := time.Now().Add(5 * ttl); ; time.Sleep(50 * time.Millisecond) {
			lb, err = b.TryAcquire(t.Context())
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B was never granted in %v after the restart: %v", 5*ttl, err)
			}
		}
		if now := time.Now(); now.Before(la.Deadline()) {
			t.Fatalf("B was granted while A's lease was valid for %v more", la.Deadline().Sub(now))
		}
		if err := lb.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("N=3 restarted empty", func(t *testing.T) { run(t, 3, false) })
	t.Run("N=5 restarted empty", func(t *testing.T) { run(t, 5, false) })
	t.Run("N=3 restarted from an older snapshot", func(t *testing.T) { run(t, 3, true) })
}

// A new node that no operator marked is quarantined for one TTL, as after a
// loss of its data: a majority of them cannot grant, and the error names
// each node's outcome. The refusals open no breaker; after one TTL the
// lock is granted.
func TestRedlockNewNodesQuarantined(t *testing.T) {
	const ttl = time.Second
	nodes := []*testserver.Redis{testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t)}
	c := redlockClient(t, nodes, WithBreaker(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Minute}))
	l := lockOn(testDomain(t, c, Policy{TTL: ttl, Renew: -1}), "k")
	_, err := l.TryAcquire(t.Context())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "quarantined") {
		t.Fatalf("on 3 new nodes: %v, want ErrUnavailable naming the quarantined nodes", err)
	}
	// The attempt is decided once a majority refused: the last node may be
	// named pending.
	quarantined := 0
	for _, n := range nodes {
		switch {
		case strings.Contains(err.Error(), n.Addr()+"=quarantined("):
			quarantined++
		case !strings.Contains(err.Error(), n.Addr()+"=pending"):
			t.Errorf("on 3 new nodes: %v, want it to name %s as quarantined or pending", err, n.Addr())
		}
	}
	if quarantined < 2 {
		t.Errorf("on 3 new nodes: %v, want at least 2 named quarantined", err)
	}
	if h := c.Health(t.Context()); !h.Healthy {
		t.Fatalf("quarantined nodes opened breakers: %+v", h)
	}
	for deadline := time.Now().Add(5 * ttl); ; time.Sleep(50 * time.Millisecond) {
		lease, err := l.TryAcquire(t.Context())
		if err == nil {
			if err := lease.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not granted %v after the nodes' first use: %v", 5*ttl, err)
		}
	}
}

// Acquire+release on 5 Redlock nodes against 1 node (the plain client), in
// one run, uncontended: over plain loopback, and through a proxy that
// delays every reply by 1ms, as a network between hosts would:
//
//	go test -run '^$' -bench 'Redlock' -benchmem -count 6 ./lockkit/
//	scripts/benchpair.sh -r 8 -n 3000 ./lockkit Redlock/nodes=1 Redlock/nodes=5 Redlock/handwritten=5
//
// handwritten=N is the floor under lockkit's figures: the least a Redlock
// round can do by hand with go-redis, SET NX PX on every node in parallel and
// then the compare-and-delete on every node in parallel, with none of
// lockkit's validity, majority or cleanup logic.
func BenchmarkRedlock(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		for _, n := range []int{1, 5} {
			name := "nodes=" + strconv.Itoa(n)
			if delay > 0 {
				name = "delay=" + delay.String() + "/" + name
			}
			b.Run(name, func(b *testing.B) { benchRedlock(b, n, delay) })
		}
	}
	for _, n := range []int{1, 5} {
		b.Run("handwritten="+strconv.Itoa(n), func(b *testing.B) { benchRedlockHandwritten(b, n) })
	}
}

func benchRedlockHandwritten(b *testing.B, n int) {
	rdbs := make([]*redis.Client, n)
	for i := range rdbs {
		rdbs[i] = benchRedis(b)
	}
	ctx := context.Background()
	key := "lock:{bench:handwritten}"
	errs := make([]error, n)
	fanOut := func(op func(rdb *redis.Client) error) {
		var wg sync.WaitGroup
		for i, rdb := range rdbs {
			wg.Go(func() { errs[i] = op(rdb) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		token := rand.Text()
		fanOut(func(rdb *redis.Client) error {
			ok, err := rdb.SetNX(ctx, key, token, 10*time.Second).Result()
			if err == nil && !ok {
				err = errors.New("SET NX refused")
			}
			return err
		})
		fanOut(func(rdb *redis.Client) error {
			return rediswire.ReleaseScript.Run(ctx, rdb, []string{key}, token).Err()
		})
	}
}

func benchRedlock(b *testing.B, n int, delay time.Duration) {
	rdbs := make([]redis.UniversalClient, n)
	for i := range rdbs {
		rdb := benchRedis(b)
		if err := rediswire.MarkRedlockNode(context.Background(), rdb); err != nil { // a new node (markRedlockNodes)
			b.Fatal(err)
		}
		if delay > 0 {
			proxy := redlockProxy(b, rdb.Options().Addr, delay)
			opts := *rdb.Options()
			opts.Addr = proxy
			rdb = redis.NewClient(&opts)
			b.Cleanup(func() { rdb.Close() })
		}
		rdbs[i] = rdb
	}
	be := New(rdbs[0])
	if n > 1 {
		be = Redlock(rdbs...)
	}
	c, err := lockkit.New(be)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
	l := d.Key(8).Literal("bench:").String("x").Lock()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// redlockProxy runs an in-process toxiproxy in front of upstream that delays
// every reply by delay, and returns its address.
func redlockProxy(tb testing.TB, upstream string, delay time.Duration) string {
	tb.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(srv, "redlock", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		tb.Fatalf("toxiproxy: %v", err)
	}
	tb.Cleanup(proxy.Stop)
	js := fmt.Sprintf(`{"name":"delay","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d}}`, delay.Milliseconds())
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		tb.Fatalf("toxiproxy: %v", err)
	}
	return proxy.Listen
}

// Redlock() with no nodes is a mistake, not a single-node client.
func TestRedlockWithoutNodesRefused(t *testing.T) {
	_, err := lockkit.New(Redlock())
	if err == nil || !strings.Contains(err.Error(), "Redlock needs its nodes") {
		t.Fatalf("lockkit.New(Redlock()) = %v", err)
	}
}

// Health follows what Redlock can still do: with 2 of 5 nodes dead and
// their breakers open, locks are granted and health is 200; with 3 dead it
// is 503.
func TestRedlockHealthToleratesMinority(t *testing.T) {
	nodes := redlockNodes(t, 5)
	c := redlockClient(t, nodes, WithBreaker(breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Minute}))
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	nodes[0].Kill(t)
	nodes[1].Kill(t)
	for i := range 3 { // trip the dead nodes' breakers
		lease, err := lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("with 3 of 5 up: %v", err)
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		lease.Release(t.Context())
	}
	// A dead node's answer (a refused dial, retried per the client's
	// DialerRetries) may come after the majority has decided: its breaker
	// counts it then. Wait for both to open.
	var h Health
	open := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h, open = c.Health(t.Context()), 0
		for _, b := range h.Breakers {
			if b.State == "open" {
				open++
			}
		}
		if open >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if open != 2 || !h.Healthy {
		t.Fatalf("2 of 5 breakers open: %d open, healthy=%v (%s); want healthy", open, h.Healthy, h.Error)
	}
	nodes[2].Kill(t)
	for i := range 3 {
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h := c.Health(t.Context())
		if !h.Healthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 of 5 nodes dead: health says healthy: %+v", h)
		}
	}
}
