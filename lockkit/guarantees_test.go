package lockkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// Issue 11, defect 1b, deterministically: the local deadline has passed but
// no background goroutine has acted on it yet (the scheduler's entry is
// still in the future), as after a SIGSTOP. Err and Valid consult the clock
// themselves, and Do reports the loss.
func TestValidityIsCheckedOnTheClock(t *testing.T) {
	r := testserver.StartRedis(t)
	l := lockOn(testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second}), "paused")
	backdate := func(lease *Lease) {
		lease.mu.Lock()
		lease.deadline = time.Now().Add(-time.Millisecond)
		lease.mu.Unlock()
	}
	var sawErr error
	var sawValid bool
	err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		if err := lease.Err(); err != nil || !lease.Valid() {
			t.Fatalf("a fresh lease: Err = %v, Valid = %v", err, lease.Valid())
		}
		backdate(lease)
		sawErr, sawValid = lease.Err(), lease.Valid()
		return nil
	})
	if !errors.Is(sawErr, ErrLockLost) || sawValid {
		t.Fatalf("past its deadline, inside fn: Err = %v, Valid = %v; want ErrLockLost and false", sawErr, sawValid)
	}
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}

	// The same when fn itself never looks: Do checks the clock after fn.
	err = l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		backdate(lease)
		return nil
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do whose lease passed its deadline unobserved = %v, want ErrLockLost", err)
	}

	// And Extend refuses to extend a lease that is already past it.
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	backdate(lease)
	if err := lease.Extend(t.Context()); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend past the deadline = %v, want ErrLockLost", err)
	}
}

// Issue 11, defect 1b, for real: a holder process is stopped (SIGSTOP, from
// outside) past its lease's deadline while fn runs, another client takes the
// key, and the holder is continued with fn about to return. Whatever its
// goroutines run first, Do must not return nil. Before the fix it did in
// about half the runs.
func TestDoInPausedProcessReportsLoss(t *testing.T) {
	if os.Getenv("LOCKKIT_PAUSED_HOLDER") != "" {
		pausedHolder()
		return
	}
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	for round := range 4 {
		key := fmt.Sprintf("lock:%s:{%d}", t.Name(), round)
		child := testserver.StartChild(t, "^TestDoInPausedProcessReportsLoss$", "LOCKKIT_PAUSED_HOLDER="+r.Addr(), "LOCKKIT_PAUSED_KEY="+key)
		for child.Next(t) != "in fn" { // Next fails on an "error …" line
		}
		child.Signal(t, syscall.SIGSTOP)
		// Past the lease's TTL, the key expires on the server; take it.
		deadline := time.Now().Add(10 * time.Second)
		for !rdb.SetNX(t.Context(), key, "thief", 10*time.Second).Val() {
			if time.Now().After(deadline) {
				t.Fatal("the paused holder's key never expired")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// fn will return the moment it is continued: its go is already queued.
		child.Send(t, "go")
		child.Signal(t, syscall.SIGCONT)
		if result := child.Next(t); result != "lost" {
			t.Fatalf("round %d: the paused holder's Do returned %q, want an error matching ErrLockLost", round, result)
		}
		_ = child.Wait(t, 10*time.Second)
		if got := rdb.Get(t.Context(), key).Val(); got != "thief" {
			t.Fatalf("round %d: the thief's key holds %q after the holder released", round, got)
		}
	}
}

// pausedHolderTTL is the paused holder's lease TTL, without renewal: long
// enough that its acquire is granted on a loaded machine (a grant that took
// longer than the TTL less drift is refused), short enough to wait out.
const pausedHolderTTL = time.Second

// pausedHolder is the child process of TestDoInPausedProcessReportsLoss.
func pausedHolder() {
	out := func(s string) { fmt.Println(s) }
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("LOCKKIT_PAUSED_HOLDER")})
	c, err := New(goredis.New(rdb))
	if err != nil {
		out("error " + err.Error())
		return
	}
	key := os.Getenv("LOCKKIT_PAUSED_KEY")
	d := c.Domain(DomainSpec{Name: "paused", Policy: Policy{TTL: pausedHolderTTL, Renew: -1}})
	in := bufio.NewReader(os.Stdin)
	err = Lock{d: d, key: key}.Do(context.Background(), func(ctx context.Context, lease *Lease) error {
		out("in fn")
		_, _ = in.ReadString('\n')
		return nil
	})
	switch {
	case err == nil:
		out("nil")
	case errors.Is(err, ErrLockLost):
		out("lost")
	default:
		out("error " + err.Error())
	}
	os.Exit(0)
}

// Issue 11, defect 2, when Close's ctx ends before fn returns: the lock is
// still not released under fn. Close says it left one lease to its TTL, the
// renewals stop, and Do reports the loss at the deadline.
func TestCloseTimeoutLeavesRunningDoToExpire(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	l := lockOn(testDomain(t, c, Policy{TTL: 600 * time.Millisecond, Renew: 50 * time.Millisecond}), "slow")
	inFn := make(chan struct{})
	doErr := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		doErr <- l.Do(context.Background(), func(ctx context.Context, lease *Lease) error {
			close(inFn)
			<-release
			return nil
		})
	}()
	<-inFn
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := c.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 of 1 leases were not released; they expire by their TTL") {
		t.Fatalf("Close = %v, want it to say one lease was left to its TTL", err)
	}
	if n := r.Client(t).Exists(t.Context(), l.Key()).Val(); n != 1 {
		t.Fatal("Close released the lock under a running fn")
	}
	select {
	case err := <-doErr:
		t.Fatalf("Do returned %v before fn did", err)
	case <-time.After(time.Second): // past the deadline, with no renewals
	}
	close(release)
	if err := <-doErr; !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do after its lease expired unrenewed = %v, want ErrLockLost", err)
	}
}

// Issue 11, defect 3: Close is bounded by its ctx and releases in parallel.
// With the server stopped, 100 leases and a 300ms ctx: one at a time, each
// release would wait out the 500ms command timeout (50s in all).
func TestCloseBoundedByCtx(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := testDomain(t, c, Policy{TTL: 30 * time.Second})
	const n = 100
	for i := range n {
		if _, err := lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	r.Pause(t)
	defer r.Resume(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Close(ctx)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d leases were not released; they expire by their TTL (the longest within 30s)", n, n)) {
		t.Fatalf("Close = %v, want an error saying how many leases expire by their TTL", err)
	}
	// Generous: the point is seconds against the 50s of serial releases.
	if took > 10*time.Second {
		t.Fatalf("Close took %v with a 300ms ctx", took)
	}
	t.Logf("Close with %d leases on a stopped server and a 300ms ctx took %v", n, took.Round(time.Millisecond))
}

// slowGoodbye is a backend whose Close waits for bye: as one whose server
// has stalled holds it (go-zookeeper waits up to a second per session for
// the server's answer to its close).
type slowGoodbye struct {
	driver.Backend
	bye, closed chan struct{}
}

// Capabilities are the wrapped backend's, less those of the interfaces
// the wrapper hides: its locks poll.
func (s *slowGoodbye) Capabilities() driver.Capabilities {
	caps := s.Backend.Capabilities()
	caps.FairQueue, caps.ServerQueue, caps.Batching, caps.Routing, caps.Holders = false, false, false, false, false
	return caps
}

func (s *slowGoodbye) Close() error {
	<-s.bye
	defer close(s.closed)
	return s.Backend.Close()
}

// Close is bounded by its ctx while the backend's own Close is held, and
// reports nothing for it: no lease was left, so nothing is lost. The
// backend then finishes closing in the background.
func TestCloseBoundedWhileBackendCloses(t *testing.T) {
	r := testserver.StartRedis(t)
	spec := goredis.New(r.Client(t))
	sg := &slowGoodbye{bye: make(chan struct{}), closed: make(chan struct{})}
	open := spec.Open
	spec.Open = func(cfg driver.Config) (driver.Backend, error) {
		be, err := open(cfg)
		if err != nil {
			return nil, err
		}
		sg.Backend = be
		return sg, nil
	}
	c := newClientOn(t, spec)
	d := testDomain(t, c, Policy{TTL: 30 * time.Second})
	if err := lockOn(d, "k").Do(t.Context(), func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	defer func() {
		select {
		case <-sg.bye:
		default:
			close(sg.bye)
		}
		select {
		case <-sg.closed:
		case <-time.After(10 * time.Second):
			t.Error("the backend's Close did not finish once let go")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Close(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close with nothing held = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close with a 300ms ctx still waits for the backend's Close after 10s")
	}
	select {
	case <-sg.closed:
		t.Fatal("the backend finished closing though its Close was held")
	default:
	}
}

// Issue 11, defect 4: leases lost through refused extends, never released by
// their holder, leave nothing behind in the client.
func TestLostLeasesAreUntracked(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r)
	d := testDomain(t, g.c, Policy{TTL: 5 * time.Second, Renew: 30 * time.Millisecond})
	rdb := r.Client(t)
	const n = 100
	leases := make([]*Lease, n)
	for i := range n {
		lease, err := lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = lease
		if err := rdb.Set(t.Context(), lease.Key(), "someone-else", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, lease := range leases {
		select {
		case <-lease.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a lease whose extend is refused was not lost")
		}
		if !errors.Is(lease.Err(), ErrLockLost) {
			t.Fatalf("lease.Err = %v, want ErrLockLost", lease.Err())
		}
	}
	g.c.mu.Lock()
	tracked := len(g.c.leases)
	g.c.mu.Unlock()
	if tracked != 0 {
		t.Fatalf("the client still tracks %d lost leases", tracked)
	}
	holds := g.named("lockkit.hold test")
	if len(holds) != n {
		t.Fatalf("%d hold spans ended, want %d (one per lost lease)", len(holds), n)
	}
	for _, h := range holds {
		if !slices.Contains(h.Attributes, telnames.AttrOutcome.String("lost")) {
			t.Fatalf("hold span ended with %v, want outcome lost", h.Attributes)
		}
	}
}

// Issue 11, defect 5: a Close between a lease's tracking and its hand-out.
// The acquisition returns ErrClosed, never a lease that is already released,
// and the key is not left held.
func TestAcquireRacingCloseNeverReturnsDeadLease(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	l := lockOn(testDomain(t, c, Policy{TTL: 5 * time.Second}), "race")
	var once sync.Once
	closed := make(chan error, 1)
	testHookTracked = func(c *Client) {
		// Close starts here, on its own goroutine: it waits for this
		// acquisition to finish, so it cannot run on this one.
		once.Do(func() {
			go func() { closed <- c.Close(context.Background()) }()
			for !c.isClosed() {
				time.Sleep(time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { testHookTracked = nil })
	lease, err := l.TryAcquire(t.Context())
	if lease != nil || !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire racing Close = %v, %v; want no lease and ErrClosed", lease, err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := r.Client(t).Exists(t.Context(), l.Key()).Val(); n != 0 {
		t.Fatal("the key is held after the acquisition was refused")
	}
	ran := false
	err = l.Do(t.Context(), func(context.Context, *Lease) error { ran = true; return nil })
	if ran || !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v (fn ran: %v), want ErrClosed without running fn", err, ran)
	}
}

// Issue 11, defect 5, without a hook: many acquisitions racing one Close.
// Each returns ErrClosed or a lease that was live when it was handed out.
func TestAcquireRacingCloseStress(t *testing.T) {
	r := testserver.StartRedis(t)
	for round := range 20 {
		c := newClient(t, r)
		d := testDomain(t, c, Policy{TTL: 5 * time.Second})
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lease, err := lockOn(d, fmt.Sprintf("%d-%d", round, i)).TryAcquire(context.Background())
				switch {
				case errors.Is(err, ErrClosed):
				case err != nil:
					errs <- err
				case deadOnArrival(lease):
					errs <- errors.New("handed out a lease that was already released")
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * 100 * time.Microsecond)
		_ = c.Close(context.Background())
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// deadOnArrival reports a lease released with no loss recorded: what the
// old code handed out when Close came between tracking and hand-out. (A
// lease Close releases after the hand-out records a loss matching ErrClosed.)
func deadOnArrival(l *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == released && l.lostErr == nil
}

// Issue 11, defect 8: a replica that missed the last grants is promoted.
// Its fence counter is behind, yet the next lease's fence must be above
// every fence issued before the failover, or a stale holder's late write
// would be accepted next to the new holder's. The same after a restart that
// lost the data.
func TestFencesIncreaseAcrossLaggingFailover(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartReplica(t, primary)
	p := Policy{TTL: 5 * time.Second, Fencing: true}
	grant := func(c *Client) int64 {
		t.Helper()
		var fence int64
		err := lockOn(testDomain(t, c, p), "seat").Do(t.Context(), func(_ context.Context, lease *Lease) error {
			fence = lease.Fence()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return fence
	}
	before := newClient(t, primary)
	var last int64
	for range 5 {
		f := grant(before)
		if f <= last {
			t.Fatalf("fence %d after %d", f, last)
		}
		last = f
	}
	waiter := primary.Client(t, func(o *redis.Options) { o.ReadTimeout = 3 * time.Second }) // the read outlasts the WAIT
	if n, err := waiter.Do(t.Context(), "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v", n, err)
	}
	// Cut the replica off (pointed at a closed port it keeps its data);
	// grants go on without it. (A SIGSTOP would not do: the stream waits in
	// the kernel's socket buffer and the replica catches up on SIGCONT.)
	rdb := replica.Client(t)
	if err := rdb.Do(t.Context(), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		last = grant(before)
	}
	primary.Kill(t)
	if err := rdb.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	stale, _ := rdb.Get(t.Context(), lockOn(testDomain(t, before, p), "seat").Key()+fenceSuffix).Int64()
	if stale >= last {
		t.Fatalf("the promoted replica's counter %d is not behind the last fence %d: the test did not make it lag", stale, last)
	}
	after := newClient(t, replica)
	if f := grant(after); f <= last {
		t.Fatalf("after failing over to a replica whose counter was %d, the fence is %d, not above the last one issued before (%d)", stale, f, last)
	}
	// A restart that lost everything: the counter is gone.
	last = grant(after)
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if f := grant(after); f <= last {
		t.Fatalf("after the data was lost, the fence is %d, not above %d", f, last)
	}
}
