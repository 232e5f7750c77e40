package fifo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

func acq(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration, fencing bool, waiterTTL time.Duration, wake string) (Result, error) {
	return Acquire(ctx, rdb, &Request{Key: key, Token: token, TTL: ttl, WaiterTTL: waiterTTL, Fencing: fencing, Wake: wake})
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func startRedis(t *testing.T) *testserver.Redis {
	t.Helper()
	testserver.RequireRedis(t)
	return testserver.StartRedis(t)
}

func tctx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquisition is one contender's run of the minimal waiting loop the
// Client's acquire loop will follow.
type acquisition struct {
	res      Result
	joined   int64  // the server's join order, 0 when granted at once
	rejoined int    // times the token had to join again (pruned, or the queue lost)
	handover bool   // granted by a release's handover, learnt from the push
	wakes    []Wake // what ended each wait
	queued   []Result
	elapsed  time.Duration
}

// acquire runs the loop: Acquire; while queued, subscribe (once) and wait
// for a push or the fallback; leave on error or ctx end.
func acquire(ctx context.Context, rdb redis.UniversalClient, n *Notifier, key, token string, ttl, waiterTTL, fallback time.Duration, fencing bool) (acquisition, error) {
	var a acquisition
	start := time.Now()
	var w *Waiter
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for {
		r, err := acq(ctx, rdb, key, token, ttl, fencing, waiterTTL, n.Channel(key))
		if err != nil {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = Leave(lctx, rdb, key, token)
			cancel()
			return a, err
		}
		if r.Granted {
			a.res, a.elapsed = r, time.Since(start)
			return a, nil
		}
		if a.joined == 0 {
			a.joined = r.Joined
		} else if r.Joined != a.joined {
			a.joined = r.Joined
			a.rejoined++
		}
		a.queued = append(a.queued, r)
		if w == nil {
			w = n.Subscribe(key, token)
		}
		k, err := w.Wait(ctx, r.Fallback(fallback))
		if err != nil {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = Leave(lctx, rdb, key, token)
			cancel()
			return a, err
		}
		a.wakes = append(a.wakes, k)
		if g, ok := w.Granted(); ok {
			a.res, a.elapsed, a.handover = g, time.Since(start), true
			return a, nil
		}
	}
}

func TestUncontendedIsOneScriptAndLeavesNoQueue(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:t{uncontended}"
	tok := newToken()
	r, err := acq(ctx, rdb, key, tok, time.Second, false, time.Second, "")
	if err != nil || !r.Granted || r.Fence != 0 {
		t.Fatalf("Acquire on a free key = %+v, %v; want granted, fence 0", r, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != tok {
		t.Fatalf("lock value %q, want the token %q exactly", v, tok)
	}
	if n := rdb.Exists(ctx, key+QueueSuffix, key+DeadlinesSuffix, key+PreviousSuffix).Val(); n != 0 {
		t.Fatalf("an uncontended grant left %d queue keys", n)
	}
	other := newToken()
	if held, err := Release(ctx, rdb, key, other, ""); err != nil || held {
		t.Fatalf("Release with another token = %v, %v; want false", held, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != tok {
		t.Fatalf("a foreign release changed the lock to %q", v)
	}
	if held, err := Release(ctx, rdb, key, tok, ""); err != nil || !held {
		t.Fatalf("Release = %v, %v; want true", held, err)
	}
	if held, _ := Release(ctx, rdb, key, tok, ""); held {
		t.Fatal("a second Release reported the lock held")
	}
}

func TestQueuePositionsAndNoBarging(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:t{positions}"
	holder := newToken()
	if r, _ := acq(ctx, rdb, key, holder, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("first Acquire not granted")
	}
	toks := []string{newToken(), newToken(), newToken()}
	var joined []int64
	for i, tok := range toks {
		r, err := acq(ctx, rdb, key, tok, time.Second, false, 5*time.Second, "")
		if err != nil || r.Granted || r.Position != i+1 {
			t.Fatalf("waiter %d: %+v, %v; want queued at %d", i, r, err, i+1)
		}
		if r.LockTTL <= 0 || r.LockTTL > 10*time.Second {
			t.Fatalf("waiter %d: LockTTL %v", i, r.LockTTL)
		}
		if s := rdb.ZScore(ctx, key+QueueSuffix, tok).Val(); int64(s) != r.Joined {
			t.Fatalf("Joined %d, server's score %f", r.Joined, s)
		}
		joined = append(joined, r.Joined)
	}
	if !sort.SliceIsSorted(joined, func(i, j int) bool { return joined[i] < joined[j] }) || joined[0] == joined[1] {
		t.Fatalf("join orders not strictly increasing: %v", joined)
	}
	// A refresh keeps the place.
	if r, _ := acq(ctx, rdb, key, toks[1], time.Second, false, 5*time.Second, ""); r.Position != 2 || r.Joined != joined[1] {
		t.Fatalf("refresh moved the waiter: %+v", r)
	}
	if held, _ := Release(ctx, rdb, key, holder, "00-trace-holder-01"); !held {
		t.Fatal("release not held")
	}
	// The lock is free, but a newcomer and a non-head waiter must not take it.
	late := newToken()
	if r, _ := acq(ctx, rdb, key, late, time.Second, false, 5*time.Second, ""); r.Granted || r.Position != 4 || r.LockTTL != 0 {
		t.Fatalf("a newcomer barged in or was misplaced: %+v", r)
	}
	if r, _ := acq(ctx, rdb, key, toks[1], time.Second, false, 5*time.Second, ""); r.Granted {
		t.Fatal("the second waiter took the lock before the head")
	}
	r, err := acq(ctx, rdb, key, toks[0], time.Second, false, 5*time.Second, "")
	if err != nil || !r.Granted {
		t.Fatalf("the head was not granted: %+v, %v", r, err)
	}
	if r.Previous != "00-trace-holder-01" {
		t.Fatalf("Previous = %q, want the releaser's trace context", r.Previous)
	}
	if r, _ := acq(ctx, rdb, key, toks[1], time.Second, false, 5*time.Second, ""); r.Position != 1 {
		t.Fatalf("after the grant the second waiter is at %d, want 1", r.Position)
	}
}

func TestFenceIsMaxOfCounterAndServerMicros(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:t{fence}"
	var last int64
	check := func(what string) {
		t.Helper()
		tok := newToken()
		r, err := acq(ctx, rdb, key, tok, time.Second, true, time.Second, "")
		if err != nil || !r.Granted {
			t.Fatalf("%s: %+v, %v", what, r, err)
		}
		now := rdb.Time(ctx).Val().UnixMicro()
		if r.Fence <= last || r.Fence > now {
			t.Fatalf("%s: fence %d, want > %d and <= server µs %d", what, r.Fence, last, now)
		}
		if c, _ := rdb.Get(ctx, key+FenceSuffix).Int64(); c != r.Fence {
			t.Fatalf("%s: counter %d, fence %d", what, c, r.Fence)
		}
		last = r.Fence
		if held, _ := Release(ctx, rdb, key, tok, ""); !held {
			t.Fatalf("%s: release", what)
		}
	}
	check("first")
	check("second")
	// A counter far ahead (issued faster than 1/µs) still increases by one.
	if err := rdb.Set(ctx, key+FenceSuffix, last+1_000_000_000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	last += 1_000_000_000
	tok := newToken()
	r, _ := acq(ctx, rdb, key, tok, time.Second, true, time.Second, "")
	if r.Fence != last+1 {
		t.Fatalf("fence %d, want counter+1 = %d", r.Fence, last+1)
	}
	last = r.Fence
	_, _ = Release(ctx, rdb, key, tok, "")
	// Data loss: the counter is gone; fences restart from the clock, but
	// this counter was ahead of it, so compare with the clock only.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	last = rdb.Time(ctx).Val().UnixMicro() - 1
	check("after FLUSHALL")
}

// TestStrictFIFOUnderContention: 16 contenders over 4 clients, each taking
// the lock several times. Every grant that came from the queue must follow
// the join order the server recorded, and no two holders overlap.
func TestStrictFIFOUnderContention(t *testing.T) {
	srv := startRedis(t)
	ctx := tctx(t, 60*time.Second)
	key := "lock:t{fifo}"
	const clients, perClient, rounds = 4, 4, 8
	var (
		mu        sync.Mutex
		grants    []int64 // join order of each grant that queued, in grant order
		immed     int
		handovers int
		inCS      atomic.Int32
		overlaps  atomic.Int32
		pushes    atomic.Int32
		timers    atomic.Int32
	)
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for c := 0; c < clients; c++ {
		rdb := srv.Client(t)
		n := NewNotifier(rdb, NotifierOptions{})
		t.Cleanup(func() { _ = n.Close() })
		for g := 0; g < perClient; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					tok := newToken()
					a, err := acquire(ctx, rdb, n, key, tok, 5*time.Second, 5*time.Second, 2*time.Second, false)
					if err != nil {
						errs <- err
						return
					}
					if inCS.Add(1) != 1 {
						overlaps.Add(1)
					}
					if a.rejoined != 0 {
						errs <- fmt.Errorf("a live waiter lost its place %d times", a.rejoined)
					}
					mu.Lock()
					if a.joined != 0 {
						grants = append(grants, a.joined)
					} else {
						immed++
					}
					if a.handover {
						handovers++
					}
					mu.Unlock()
					for _, k := range a.wakes {
						switch k {
						case WakePush:
							pushes.Add(1)
						case WakeTimer:
							timers.Add(1)
						}
					}
					time.Sleep(time.Millisecond)
					if v := rdb.Get(ctx, key).Val(); v != tok {
						errs <- fmt.Errorf("lock holds %q during our critical section", v)
					}
					inCS.Add(-1)
					if held, err := Release(ctx, rdb, key, tok, ""); err != nil || !held {
						errs <- fmt.Errorf("release: %v, %v", held, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if o := overlaps.Load(); o != 0 {
		t.Fatalf("%d overlapping critical sections", o)
	}
	if len(grants)+immed != clients*perClient*rounds {
		t.Fatalf("%d grants, want %d", len(grants)+immed, clients*perClient*rounds)
	}
	for i := 1; i < len(grants); i++ {
		if grants[i] <= grants[i-1] {
			t.Fatalf("grant %d joined at %d, before grant %d (joined %d): not FIFO", i, grants[i], i-1, grants[i-1])
		}
	}
	if len(grants) < clients*perClient*rounds/2 {
		t.Fatalf("only %d of %d grants came from the queue: no contention to test", len(grants), clients*perClient*rounds)
	}
	t.Logf("%d queued grants in join order (%d by handover), %d immediate; wakes: %d push, %d timer", len(grants), handovers, immed, pushes.Load(), timers.Load())
	if handovers == 0 {
		t.Fatal("no grant came by handover")
	}
	if pushes.Load() == 0 {
		t.Fatal("no waiter was woken by a push")
	}
}

func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	n := NewNotifier(rdb, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	ctx := tctx(t, 20*time.Second)
	key := "lock:t{cancel}"
	holder := newToken()
	if r, _ := acq(ctx, rdb, key, holder, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("holder not granted")
	}
	a, b, c := newToken(), newToken(), newToken()
	actx, cancelA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		_, err := acquire(actx, rdb, n, key, a, time.Second, 5*time.Second, 10*time.Second, false)
		aDone <- err
	}()
	waitQueued(t, rdb, key, a, 1)
	for i, tok := range []string{b, c} {
		if r, _ := acq(ctx, rdb, key, tok, time.Second, false, 5*time.Second, n.Channel(key)); r.Position != i+2 {
			t.Fatalf("position %d, want %d", r.Position, i+2)
		}
	}
	cancelA()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter returned %v", err)
	}
	if err := rdb.ZScore(ctx, key+QueueSuffix, a).Err(); err != redis.Nil {
		t.Fatalf("the cancelled waiter is still queued (%v)", err)
	}
	if err := rdb.ZScore(ctx, key+DeadlinesSuffix, a).Err(); err != redis.Nil {
		t.Fatalf("the cancelled waiter still has a deadline (%v)", err)
	}
	// a's waiter was the channel's only one: its unsubscription is under
	// way. b subscribes once it is done, so that the count below is b's
	// subscription, not a's before it went (a push published between the
	// two would reach no one; the waiter is then woken by its resubscribe).
	numsub := func() int64 { return rdb.PubSubNumSub(ctx, n.Channel(key)).Val()[n.Channel(key)] }
	waitFor(t, "a's unsubscription", func() bool { return numsub() == 0 })
	// b is the head now; the release wakes it, by push.
	bw := n.Subscribe(key, b)
	defer bw.Close()
	waitFor(t, "the subscription", func() bool { return numsub() == 1 })
	if held, _ := Release(ctx, rdb, key, holder, ""); !held {
		t.Fatal("release")
	}
	waitPush(t, ctx, bw)
	// b gives up while the lock is free and it is the head: its leave
	// wakes c.
	cw := n.Subscribe(key, c)
	defer cw.Close()
	if err := Leave(ctx, rdb, key, b); err != nil {
		t.Fatal(err)
	}
	waitPush(t, ctx, cw)
	if r, _ := acq(ctx, rdb, key, c, time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatalf("c not granted after b left: %+v", r)
	}
}

func waitQueued(t *testing.T, rdb *redis.Client, key, tok string, pos int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r, err := rdb.ZRank(context.Background(), key+QueueSuffix, tok).Result()
		if err == nil && int(r)+1 == pos {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s not queued at %d within 5s", tok, pos)
}

func TestNotifierOneSubscriptionPerKeyAndNoLeak(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.ClientName = "fifo-notifier" })
	ctx := tctx(t, 30*time.Second)
	_ = admin.Ping(ctx).Err() // warm the pools: their goroutines do not count
	_ = rdb.Ping(ctx).Err()
	before := runtime.NumGoroutine()
	n := NewNotifier(rdb, NotifierOptions{Linger: 50 * time.Millisecond})
	keys := []string{"lock:t{n1}", "lock:t{n2}"}
	var ws []*Waiter
	var toks []string
	for _, k := range keys {
		for range 4 {
			tok := newToken()
			toks = append(toks, tok)
			ws = append(ws, n.Subscribe(k, tok))
		}
	}
	numsub := func(k string) int64 { return admin.PubSubNumSub(ctx, n.Channel(k)).Val()[n.Channel(k)] }
	for _, k := range keys {
		waitFor(t, "the subscription to "+k, func() bool { return numsub(k) > 0 })
		if s := numsub(k); s != 1 {
			t.Fatalf("%s: %d subscriptions for 4 waiters, want 1", k, s)
		}
	}
	// A message wakes only the waiter it names.
	for i, w := range ws {
		if err := admin.Publish(ctx, n.Channel(keys[i/4]), toks[i]).Err(); err != nil {
			t.Fatal(err)
		}
		waitPush(t, ctx, w)
		for j, o := range ws {
			select {
			case k := <-o.C():
				if k == WakePush {
					t.Fatalf("a message for waiter %d woke waiter %d", i, j)
				}
			default:
			}
		}
	}
	if c := pubsubConns(t, admin); c != 1 {
		t.Fatalf("%d Pub/Sub connections for 2 keys, want 1", c)
	}
	for _, w := range ws[:4] {
		w.Close()
		w.Close()
	}
	waitFor(t, "the first key unsubscribed", func() bool { return numsub(keys[0]) == 0 })
	if s := numsub(keys[1]); s != 1 {
		t.Fatalf("second key: %d subscriptions, want 1", s)
	}
	for _, w := range ws[4:] {
		w.Close()
	}
	// Linger passes; the connection closes; a new waiter opens another.
	waitFor(t, "the idle connection closed", func() bool { return pubsubConns(t, admin) == 0 && numsub(keys[1]) == 0 })
	w := n.Subscribe(keys[0], newToken())
	if k, err := w.Wait(ctx, 5*time.Second); err != nil || k != WakeSubscribed {
		t.Fatalf("after linger: wake %v, %v", k, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if n.Subscribe(keys[0], newToken()).g != nil {
		t.Fatal("Subscribe after Close registered a waiter")
	}
	waitFor(t, "goroutines back to the count before", func() bool { return runtime.NumGoroutine() <= before })
	waitFor(t, "no Pub/Sub connection left", func() bool { return pubsubConns(t, admin) == 0 })
}

// pubsubConns counts the server's connections named fifo-notifier that are
// in Pub/Sub mode or idle after it (any but the pool's, which run commands).
func pubsubConns(t *testing.T, admin *redis.Client) int {
	t.Helper()
	s, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if slices.Contains(f, "name=fifo-notifier") && (slices.ContainsFunc(f, func(s string) bool {
			return strings.HasPrefix(s, "cmd=subscribe") || strings.HasPrefix(s, "cmd=unsubscribe") ||
				strings.HasPrefix(s, "cmd=ssubscribe") || strings.HasPrefix(s, "cmd=sunsubscribe")
		})) {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (10s) waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitPush waits for w's next push, skipping subscription wakes.
func waitPush(t *testing.T, ctx context.Context, w *Waiter) {
	t.Helper()
	for {
		k, err := w.Wait(ctx, 5*time.Second)
		switch {
		case err != nil:
			t.Fatal(err)
		case k == WakeTimer:
			t.Fatal("no push within 5s")
		case k == WakePush:
			return
		}
	}
}

// TestReleaseWakesOnlyTheHeadsClient: a release publishes on the channel
// of the head's Notifier alone, so the other clients receive nothing.
func TestReleaseWakesOnlyTheHeadsClient(t *testing.T) {
	srv := startRedis(t)
	ctx := tctx(t, 20*time.Second)
	key := "lock:t{onlyhead}"
	r1, r2 := srv.Client(t), srv.Client(t)
	n1, n2 := NewNotifier(r1, NotifierOptions{}), NewNotifier(r2, NotifierOptions{})
	t.Cleanup(func() { _ = n1.Close(); _ = n2.Close() })
	if n1.Channel(key) == n2.Channel(key) {
		t.Fatal("two Notifiers share a channel")
	}
	holder, head, second := newToken(), newToken(), newToken()
	if r, _ := acq(ctx, r1, key, holder, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("holder")
	}
	if r, _ := acq(ctx, r1, key, head, 10*time.Second, false, 5*time.Second, n1.Channel(key)); r.Position != 1 {
		t.Fatal("head")
	}
	if r, _ := acq(ctx, r2, key, second, 10*time.Second, false, 5*time.Second, n2.Channel(key)); r.Position != 2 {
		t.Fatal("second")
	}
	w1, w2 := n1.Subscribe(key, head), n2.Subscribe(key, second)
	defer w1.Close()
	defer w2.Close()
	for _, c := range []string{n1.Channel(key), n2.Channel(key)} {
		waitFor(t, "the subscription to "+c, func() bool { return r1.PubSubNumSub(ctx, c).Val()[c] == 1 })
	}
	// PUBLISH returns the number of receivers: watch the release's by
	// checking the second client saw nothing at all.
	if held, _ := Release(ctx, r1, key, holder, ""); !held {
		t.Fatal("release")
	}
	waitPush(t, ctx, w1)
	time.Sleep(50 * time.Millisecond)
	n2.mu.Lock()
	recent := n2.groups[""].chans[n2.Channel(key)].recent
	n2.mu.Unlock()
	if recent != ([8]string{}) {
		t.Fatalf("the second client received %q", recent)
	}
	select {
	case k := <-w2.C():
		if k == WakePush {
			t.Fatal("the second waiter was pushed")
		}
	default:
	}
}

// TestAbandonedQueueExpires: waiters that vanish without leaving leave
// keys that expire by themselves, one waiter TTL later.
func TestAbandonedQueueExpires(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:t{abandoned}"
	if r, _ := acq(ctx, rdb, key, newToken(), 200*time.Millisecond, false, time.Second, ""); !r.Granted {
		t.Fatal("holder")
	}
	for range 3 {
		if r, _ := acq(ctx, rdb, key, newToken(), time.Second, false, 300*time.Millisecond, "lock:t{abandoned}:w:x"); r.Granted {
			t.Fatal("granted")
		}
	}
	for _, k := range []string{key + QueueSuffix, key + DeadlinesSuffix, key + WaitersSuffix} {
		if d := rdb.PTTL(ctx, k).Val(); d <= 0 || d > 300*time.Millisecond {
			t.Fatalf("%s: PTTL %v, want (0, 300ms]", k, d)
		}
	}
	waitFor(t, "the queue keys to expire", func() bool {
		return rdb.Exists(ctx, key, key+QueueSuffix, key+DeadlinesSuffix, key+WaitersSuffix).Val() == 0
	})
}

// TestHandover: a release hands the lock to the head in the same script
// (the lock holds the head's token at once, for min(TTL, WaiterTTL)), with
// its fence, and the push carries the grant; a newcomer cannot take the
// lock; the head's Acquire finds the same grant, as it would if the push
// were lost.
func TestHandover(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	n := NewNotifier(rdb, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	ctx := tctx(t, 20*time.Second)
	key := "lock:t{handover}"
	holder, head, next := newToken(), newToken(), newToken()
	r0, _ := acq(ctx, rdb, key, holder, 10*time.Second, true, 5*time.Second, "")
	if !r0.Granted || r0.Earlier || r0.LockTTL != 10*time.Second {
		t.Fatalf("holder: %+v", r0)
	}
	if r, _ := acq(ctx, rdb, key, head, 10*time.Second, true, 2*time.Second, n.Channel(key)); r.Position != 1 {
		t.Fatal("head")
	}
	if r, _ := acq(ctx, rdb, key, next, 10*time.Second, true, 5*time.Second, n.Channel(key)); r.Position != 2 {
		t.Fatal("next")
	}
	w := n.Subscribe(key, head)
	defer w.Close()
	waitFor(t, "the subscription", func() bool { return rdb.PubSubNumSub(ctx, n.Channel(key)).Val()[n.Channel(key)] == 1 })
	if held, _ := Release(ctx, rdb, key, holder, "00-prev-01"); !held {
		t.Fatal("release")
	}
	if v := rdb.Get(ctx, key).Val(); v != head {
		t.Fatalf("after the release the lock holds %q, want the head's token", v)
	}
	if d := rdb.PTTL(ctx, key).Val(); d <= 0 || d > 2*time.Second {
		t.Fatalf("handover PTTL %v, want min(TTL 10s, WaiterTTL 2s)", d)
	}
	fence, _ := rdb.Get(ctx, key+FenceSuffix).Int64()
	if fence <= r0.Fence {
		t.Fatalf("counter %d after the handover, first fence %d", fence, r0.Fence)
	}
	if r, _ := acq(ctx, rdb, key, newToken(), time.Second, true, time.Second, ""); r.Granted {
		t.Fatal("a newcomer took a handed-over lock")
	}
	waitPush(t, ctx, w)
	g, ok := w.Granted()
	if !ok || g.Fence != fence || g.Previous != "00-prev-01" || g.LockTTL != 2*time.Second || !g.Earlier {
		t.Fatalf("pushed grant %+v, %v; want fence %d, previous, LockTTL 2s", g, ok, fence)
	}
	r, err := acq(ctx, rdb, key, head, 10*time.Second, true, 2*time.Second, n.Channel(key))
	if err != nil || !r.Granted || !r.Earlier || r.Fence != fence || r.Previous != "00-prev-01" {
		t.Fatalf("the head's Acquire after a handover: %+v, %v; want the same grant", r, err)
	}
	if err := rdb.ZScore(ctx, key+QueueSuffix, head).Err(); err != redis.Nil {
		t.Fatalf("the head is still queued after the handover (%v)", err)
	}
	if err := rdb.HGet(ctx, key+WaitersSuffix, head).Err(); err != redis.Nil {
		t.Fatalf("the head's waiter entry outlived the handover (%v)", err)
	}
	// The head leaves at once (its caller gave up): Leave releases the
	// handed-over lock and hands it on.
	if err := Leave(ctx, rdb, key, head); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key).Val(); v != next {
		t.Fatalf("after the head left the lock holds %q, want the next waiter", v)
	}
}

// TestHolderValues: the lock's value is internal/holder's, token ';'
// description, on a direct grant and on a handover (the description the
// waiter queued with); the owner checks accept it and never a token that
// is only a prefix of the holder's.
func TestHolderValues(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	n := NewNotifier(rdb, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	ctx := tctx(t, 20*time.Second)
	key := "lock:t{holders}"
	first, second := newToken(), newToken()
	r, err := Acquire(ctx, rdb, &Request{Key: key, Token: first, Holder: "h=a&p=1", TTL: 10 * time.Second, WaiterTTL: 5 * time.Second, Wake: n.Channel(key)})
	if err != nil || !r.Granted {
		t.Fatalf("first: %+v, %v", r, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != first+";h=a&p=1" {
		t.Fatalf("value %q, want the token and the description", v)
	}
	// The holder's Acquire again finds its own grant (owns(), not ==).
	if r, _ := Acquire(ctx, rdb, &Request{Key: key, Token: first, Holder: "h=a&p=1", TTL: 10 * time.Second, WaiterTTL: 5 * time.Second}); !r.Granted || !r.Earlier {
		t.Fatalf("the holder's second Acquire: %+v", r)
	}
	if r, _ := Acquire(ctx, rdb, &Request{Key: key, Token: second, Holder: "h=b&o=x", TTL: 10 * time.Second, WaiterTTL: 5 * time.Second, Wake: n.Channel(key)}); r.Granted || r.Position != 1 {
		t.Fatalf("second: %+v", r)
	}
	// A prefix of the holder's token owns nothing.
	if held, _ := Release(ctx, rdb, key, first[:10], ""); held {
		t.Fatal("a prefix of the token released the lock")
	}
	if held, err := Release(ctx, rdb, key, first, ""); !held || err != nil {
		t.Fatalf("release: %v, %v", held, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != second+";h=b&o=x" {
		t.Fatalf("handed-over value %q, want the waiter's token and description", v)
	}
	if _, err := Acquire(ctx, rdb, &Request{Key: key, Token: "a;b", TTL: time.Second, WaiterTTL: time.Second}); err == nil {
		t.Fatal("a token with ';' was accepted")
	}
}

// TestPreviousIsTheLastReleasers: the trace context a waiter gets is its
// immediate predecessor's, or none when that one left none; never an older
// holder's.
func TestPreviousIsTheLastReleasers(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 20*time.Second)
	key := "lock:t{previous}"
	a, b, c := newToken(), newToken(), newToken()
	if r, _ := acq(ctx, rdb, key, a, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("a")
	}
	for _, tok := range []string{b, c} {
		if r, _ := acq(ctx, rdb, key, tok, 10*time.Second, false, 5*time.Second, "x"+ChannelSuffix+"1"); r.Granted {
			t.Fatal("queued waiter granted")
		}
	}
	if held, _ := Release(ctx, rdb, key, a, "ctx-a"); !held {
		t.Fatal("release a")
	}
	if r, _ := acq(ctx, rdb, key, b, 10*time.Second, false, 5*time.Second, ""); !r.Granted || r.Previous != "ctx-a" {
		t.Fatalf("b: %+v, want a's context", r)
	}
	if held, _ := Release(ctx, rdb, key, b, ""); !held {
		t.Fatal("release b")
	}
	if r, _ := acq(ctx, rdb, key, c, 10*time.Second, false, 5*time.Second, ""); !r.Granted || r.Previous != "" {
		t.Fatalf("c: %+v, want no context (b left none), not a's", r)
	}
}

// keysOf names the same keys as concatenation does, in order.
func TestKeysOf(t *testing.T) {
	for _, key := range []string{"lock:{a}", "", "lock:{ü:%7B}"} {
		got := keysOf(key, QueueSuffix, DeadlinesSuffix, PreviousSuffix, WaitersSuffix, FenceSuffix)
		want := []string{key, key + QueueSuffix, key + DeadlinesSuffix, key + PreviousSuffix, key + WaitersSuffix, key + FenceSuffix}
		if !slices.Equal(got, want) {
			t.Fatalf("keysOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// scriptArgs lays out a script's command as rediswire.ScriptArgs does with
// keysOf's keys (the two slots RunArgs fills left empty), with every key a
// string, as go-redis hooks and Cluster routing read them.
func TestScriptArgsMatchesKeysOf(t *testing.T) {
	for _, suffixes := range [][]string{queueSuffixes, queueFenceSuffixes} {
		key := "lock:{a}"
		got := scriptArgs(key, suffixes, "tok", int64(10000), "")
		want := rediswire.ScriptArgs("", nil, keysOf(key, suffixes...), []any{"tok", int64(10000), ""})
		got[0], got[1], want[0], want[1] = nil, nil, nil, nil
		if !slices.Equal(got, want) {
			t.Fatalf("scriptArgs(%q, %q) = %q, want %q", key, suffixes, got, want)
		}
	}
}
