package zookeeper_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
	"github.com/redis/go-redis/v9"
)

const (
	holderEnv = "LOCKKIT_ZK_HOLDER" // set in the child process: the servers
	churnEnv  = "LOCKKIT_ZK_CHURN"  // set in churnMain's child: the servers
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	if os.Getenv(churnEnv) != "" {
		os.Exit(churnMain())
	}
	os.Exit(m.Run())
}

// churnKeys is how many keys churnMain's child holds, one goroutine each.
const churnKeys = 8

// churnMain is the child of PausedChurn: churnKeys goroutines each take
// their own key (TTL 1s, fenced) over and over, as the fault harness's
// workers do, until "quiet" on stdin; then it says "quiet", keeps its
// client (and session) open, and exits on "exit". On "count" it says how
// many grants it has had.
func churnMain() int {
	servers := strings.Split(os.Getenv(churnEnv), ",")
	c, err := lockkit.New(zookeeper.New(servers, bounds, undeclared), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	p := lockkit.Policy{TTL: time.Second, Fencing: true, Retry: lockkit.Retry{Attempts: 1 << 20, Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxWait: 2 * time.Second}}
	var (
		quiet atomic.Bool
		wg    sync.WaitGroup
		held  atomic.Int64
		// lastErr is the last error a Do returned.
		lastErr atomic.Value
	)
	lastErr.Store("")
	for i := range churnKeys {
		lk := lockOf(c, "churn", p, strconv.Itoa(i))
		wg.Go(func() {
			for !quiet.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := lk.Do(ctx, func(ctx context.Context, _ *lockkit.Lease) error {
					held.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					return nil
				})
				cancel()
				if err != nil {
					lastErr.Store(err.Error())
				}
			}
		})
	}
	fmt.Println("started")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "quiet":
			quiet.Store(true)
			wg.Wait()
			fmt.Printf("quiet %d %q\n", held.Load(), lastErr.Load())
		case "count":
			fmt.Printf("count %d\n", held.Load())
		case "exit":
			_ = c.Close(context.Background())
			return 0
		}
	}
	return 1
}

// holderMain is the child of PauseHolder: it takes the lock, says its
// fence, and on "write" from stdin (sent after it was stopped and
// continued) makes its fenced write and says how it went.
func holderMain() int {
	servers := strings.Split(os.Getenv(holderEnv), ",")
	c, err := lockkit.New(zookeeper.New(servers, bounds, undeclared), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	lk := lockOf(c, "paused", lockkit.Policy{TTL: time.Second, Fencing: true}, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	//lockkit-vet:ignore test: the lease is left to the fault under test or the client's Close
	l, err := lk.Acquire(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("LOCKKIT_ZK_REDIS")})
	fmt.Println("fence", l.Fence())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() != "write" {
			continue
		}
		valid := l.Valid()
		err := fence.Set(ctx, rdb, "resource", "child", l.Fence())
		switch {
		case errors.Is(err, fence.ErrFenced):
			fmt.Println("rejected valid="+strconv.FormatBool(valid), l.Err() != nil)
		case err != nil:
			fmt.Println("error", err)
		default:
			fmt.Println("accepted valid=" + strconv.FormatBool(valid))
		}
		return 0
	}
	return 1
}

// hold is one lease's time in fn, and its fence.
type hold struct {
	start, end time.Time
	fence      int64
}

// workload runs contenders on one key through clients until stop, each
// hold making a fenced write and leaving fn as soon as its ctx ends.
type workload struct {
	mu       sync.Mutex
	holds    []hold
	errs     map[string]int
	sample   []string
	rejected int
	wg       sync.WaitGroup
	stop     chan struct{}
}

func startWorkload(t *testing.T, clients []*lockkit.Client, rdb *redis.Client, key string, ttl time.Duration) *workload {
	w := &workload{errs: map[string]int{}, stop: make(chan struct{})}
	p := lockkit.Policy{TTL: ttl, Fencing: true, Retry: lockkit.Retry{Attempts: 1 << 20, Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxWait: 5 * time.Second}}
	for i, c := range clients {
		for j := range 2 {
			w.wg.Go(func() {
				for {
					select {
					case <-w.stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := lockOf(c, "fault", p, key).Do(ctx, func(ctx context.Context, l *lockkit.Lease) error {
						h := hold{start: time.Now(), fence: l.Fence()}
						ferr := fence.Set(ctx, rdb, "resource", fmt.Sprintf("c%d.%d", i, j), l.Fence())
						select {
						case <-ctx.Done():
						case <-time.After(20 * time.Millisecond):
						}
						h.end = time.Now()
						if d := l.Deadline(); d.Before(h.end) {
							h.end = d
						}
						w.mu.Lock()
						w.holds = append(w.holds, h)
						if errors.Is(ferr, fence.ErrFenced) {
							w.rejected++
						}
						w.mu.Unlock()
						return nil
					})
					cancel()
					if err != nil {
						w.mu.Lock()
						w.errs[errClass(err)]++
						if len(w.sample) < 5 {
							w.sample = append(w.sample, err.Error())
						}
						w.mu.Unlock()
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
	}
	return w
}

func errClass(err error) string {
	for _, e := range []error{lockkit.ErrLockLost, lockkit.ErrUnavailable, lockkit.ErrNotAcquired, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// finish stops the workload and checks it: no two holds overlapping in
// time (a hold ends at its lease's deadline at the latest), no fence
// granted twice, fences increasing with the holds.
func (w *workload) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	hs := slices.Clone(w.holds)
	slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
	seen := map[int64]bool{}
	for i, h := range hs {
		if seen[h.fence] {
			t.Errorf("fence %#x granted twice", h.fence)
		}
		seen[h.fence] = true
		if i > 0 {
			prev := hs[i-1]
			if h.start.Before(prev.end) {
				t.Errorf("two valid holders: fence %#x from %v while fence %#x held until %v", h.fence, h.start.Format("15:04:05.000"), prev.fence, prev.end.Format("15:04:05.000"))
			}
			if h.fence <= prev.fence {
				t.Errorf("fence %#x after %#x", h.fence, prev.fence)
			}
		}
	}
	if len(hs) == 0 {
		t.Error("no holds at all")
	}
	t.Logf("%d holds, fenced writes rejected %d, errors %v", len(hs), w.rejected, w.errs)
}

// holdsSince counts holds that started after t0.
func (w *workload) holdsSince(t0 time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, h := range w.holds {
		if h.start.After(t0) {
			n++
		}
	}
	return n
}

// waitHolds waits until the workload has made n holds after t0.
func (w *workload) waitHolds(t *testing.T, t0 time.Time, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for w.holdsSince(t0) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d holds within %v (errors %v)", n, within, w.errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unblocked checks that nothing is left behind on key: a fresh client gets
// it within bounded time, and its node is the only one.
func unblocked(t *testing.T, servers []string, domain, id string, within time.Duration) {
	t.Helper()
	c := newClient(t, servers, undeclared)
	p := lockkit.Policy{TTL: 2 * time.Second, Fencing: true, Retry: lockkit.Retry{Attempts: 1 << 20, Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxWait: within}}
	lk := lockOf(c, domain, p, id)
	l, err := lk.Acquire(ctxT(t, within+5*time.Second))
	if err != nil {
		t.Fatalf("the lock is still blocked after the workload stopped: %v", err)
	}
	raw := rawConn(t, servers)
	if kids := nodes(t, raw, zookeeper.LockPath("/lockkit", lk.Key())); len(kids) != 1 {
		t.Errorf("nodes %v while one client holds the lock", kids)
	}
	//lockkit-vet:ignore test: the release outcome is not what this test checks
	_ = l.Release(ctxT(t, 10*time.Second))
}

// healthy waits until every member runs and serves, with a leader.
func healthy(t *testing.T, z *testserver.ZooKeeper) {
	t.Helper()
	for _, m := range z.Members {
		if !m.Running() {
			m.Start(t)
		}
	}
	z.Leader(t, 60*time.Second)
}

// TestEnsemble runs the fault histories on one 3-member ensemble, one after
// the other (each leaves it whole). In each: no two valid holders, no fence
// granted twice, and nothing left behind that blocks later acquires.
func TestEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member ZooKeeper ensemble")
	}
	z := startZK(t, 3)
	servers := z.Servers()
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	const ttl = 2 * time.Second
	clients := func(t *testing.T) []*lockkit.Client {
		return []*lockkit.Client{newClient(t, servers, undeclared), newClient(t, servers, undeclared)}
	}

	// kill -9 the leader under load; log how long until a lock is granted
	// again.
	t.Run("KillLeader", func(t *testing.T) {
		w := startWorkload(t, clients(t), rdb, "kill", ttl)
		w.waitHolds(t, time.Time{}, 10, 30*time.Second)
		leader := z.Leader(t, 10*time.Second)
		killed := time.Now()
		z.Members[leader].Kill(t)
		probe := newClient(t, servers, undeclared)
		for i := 0; ; i++ {
			l, err := lockOf(probe, "regrant", lockkit.Policy{TTL: ttl}, strconv.Itoa(i)).TryAcquire(ctxT(t, 10*time.Second))
			if err == nil {
				t.Logf("leader killed: a lock granted again after %v", time.Since(killed))
				//lockkit-vet:ignore test: the release outcome is not what this test checks
				_ = l.Release(ctxT(t, 10*time.Second))
				break
			}
			if time.Since(killed) > 60*time.Second {
				t.Fatalf("no grant within 60s of the leader's kill: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		w.waitHolds(t, time.Now(), 10, 30*time.Second)
		w.finish(t)
		healthy(t, z)
		unblocked(t, servers, "fault", "kill", 2*ttl)
	})

	// SIGSTOP the leader for longer than the TTL: its followers elect
	// another; the holders' sessions move or expire.
	t.Run("PauseLeader", func(t *testing.T) {
		w := startWorkload(t, clients(t), rdb, "pause", ttl)
		w.waitHolds(t, time.Time{}, 10, 30*time.Second)
		leader := z.Leader(t, 10*time.Second)
		z.Members[leader].Pause(t)
		time.Sleep(ttl + time.Second)
		z.Members[leader].Resume(t)
		w.waitHolds(t, time.Now(), 10, 60*time.Second)
		w.finish(t)
		healthy(t, z)
		unblocked(t, servers, "fault", "pause", 2*ttl)
	})

	// SIGSTOP the holder's process for longer than its session timeout:
	// the server expires its session and grants the lock to another with
	// a higher fence; the paused holder's late fenced write is rejected.
	t.Run("PauseHolder", func(t *testing.T) {
		child := testserver.StartChild(t, "TestEnsemble", holderEnv+"="+strings.Join(servers, ","), "LOCKKIT_ZK_REDIS="+r.Addr())
		line := child.Next(t)
		f1, err := strconv.ParseInt(strings.TrimPrefix(line, "fence "), 10, 64)
		if err != nil {
			t.Fatalf("child: %q", line)
		}
		child.Signal(t, syscall.SIGSTOP)
		stopped := time.Now()
		c := newClient(t, servers, undeclared)
		p := lockkit.Policy{TTL: time.Second, Fencing: true, Retry: retry}
		l, err := lockOf(c, "paused", p, "k").Acquire(ctxT(t, 60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("granted %v after the holder was stopped (its session timeout 1s)", time.Since(stopped))
		if l.Fence() <= f1 {
			t.Fatalf("fence %d after the paused holder's %d", l.Fence(), f1)
		}
		if err := fence.Set(ctxT(t, 5*time.Second), rdb, "resource", "new holder", l.Fence()); err != nil {
			t.Fatal(err)
		}
		child.Send(t, "write")
		child.Signal(t, syscall.SIGCONT)
		if got := child.Next(t); !strings.HasPrefix(got, "rejected valid=false") {
			t.Fatalf("the paused holder's late write: %q, want rejected (and its lease not valid)", got)
		}
		v, _, err := fence.Get(ctxT(t, 5*time.Second), rdb, "resource")
		if err != nil || v != "new holder" {
			t.Fatalf("resource = %q, %v", v, err)
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = l.Release(ctxT(t, 10*time.Second))
		_ = child.Wait(t, 10*time.Second)
		unblocked(t, servers, "paused", "k", 2*ttl)
	})

	// SIGSTOP a process that keeps taking locks for longer than its
	// session timeout, several times: each time the server expires its
	// session, and the process, continued, sends its next creates at once,
	// some before go-zookeeper has seen its connection closed. Such a
	// create waits in go-zookeeper's send queue and goes out on the
	// session that replaces the expired one. Once the process stops taking
	// locks (its session open), no node of it may be left: a leftover one
	// would block its key for as long as the process lives.
	t.Run("PausedChurn", func(t *testing.T) {
		child := testserver.StartChild(t, "TestEnsemble", churnEnv+"="+strings.Join(servers, ","))
		if line := child.Next(t); line != "started" {
			t.Fatalf("child: %q", line)
		}
		raw := rawConn(t, servers)
		keys := newClient(t, servers, undeclared)
		// granted waits until the child has had more than n grants: each
		// pause comes while it is taking locks (on a loaded machine a
		// continued child may need seconds for a new session), so every
		// pause tries the history, whatever the load.
		granted := func(n int) int {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				child.Send(t, "count")
				var got int
				if line := child.Next(t); func() error { _, err := fmt.Sscanf(line, "count %d", &got); return err }() != nil {
					t.Fatalf("child: %q", line)
				}
				if got > n {
					return got
				}
				if time.Now().After(deadline) {
					t.Fatalf("the child took no lock in 30s after %d grants", n)
				}
			}
		}
		const pauses = 5
		n := 0
		for range pauses {
			n = granted(n)
			time.Sleep(300 * time.Millisecond)
			child.Signal(t, syscall.SIGSTOP)
			time.Sleep(2500 * time.Millisecond) // past the 1s session timeout
			child.Signal(t, syscall.SIGCONT)
		}
		granted(n)
		child.Send(t, "quiet")
		var (
			grants  int
			lastErr string
		)
		if line := child.Next(t); func() error { _, err := fmt.Sscanf(line, "quiet %d %q", &grants, &lastErr); return err }() != nil {
			t.Fatalf("child: %q", line)
		}
		t.Logf("child: %d grants, %d pauses past its session timeout; its last error: %s", grants, pauses, lastErr)
		if grants == 0 {
			t.Fatalf("the child took no lock (its last error: %s): the test proves nothing", lastErr)
		}
		// Nothing holds a key now: every node of the child must go, within
		// its TTL and the sweeper's round (generous bound: a leftover node
		// of a live session stays for good).
		deadline := time.Now().Add(10 * time.Second)
		for {
			var left []string
			for i := range churnKeys {
				path := zookeeper.LockPath("/lockkit", lockOf(keys, "churn", lockkit.Policy{TTL: time.Second}, strconv.Itoa(i)).Key())
				for _, n := range nodes(t, raw, path) {
					_, st, err := raw.Get(path + "/" + n)
					if err == nil {
						left = append(left, fmt.Sprintf("%s/%s (session %#x)", path, n, st.EphemeralOwner))
					}
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d node(s) left behind by a process that holds no lock, its session open, after %d pauses past its session timeout (each blocks its key for as long as the process lives): %v", len(left), pauses, left)
			}
			time.Sleep(100 * time.Millisecond)
		}
		child.Send(t, "exit")
		_ = child.Wait(t, 10*time.Second)
	})

	// The server a holder's session is on stops answering (SIGSTOP): a
	// follower for 2 TTLs, then the leader for up to 9s, cut short by the
	// contender's grant. Then a new session's first server is the stopped
	// one (paused_server_test.go).
	for _, role := range []string{"follower", "leader"} {
		pauseFor := 2 * ttl
		if role == "leader" {
			// Far past the election: a client whose reconnection cycles to
			// the stopped leader must not stay there while the new leader
			// serves.
			pauseFor = 9 * time.Second
		}
		t.Run("PauseSessionServer/"+role, func(t *testing.T) {
			pausedSessionServer(t, z, servers, role, ttl, pauseFor)
		})
	}
	t.Run("PausedServerNewSession", func(t *testing.T) { pausedServerNewSession(t, z, servers) })

	// A create whose reply is lost, through a proxy in front of a follower.
	t.Run("LostCreateReply", func(t *testing.T) {
		leader := z.Leader(t, 10*time.Second)
		lostCreate(t, z.Members[(leader+1)%3].Addr(), rawConn(t, servers))
	})

	// Restart the whole ensemble under load: fences go on increasing
	// (Czxid's epoch grows), and nothing is left blocking.
	t.Run("RestartAll", func(t *testing.T) {
		w := startWorkload(t, clients(t), rdb, "restart", ttl)
		w.waitHolds(t, time.Time{}, 10, 30*time.Second)
		z.RestartAll(t)
		healthy(t, z)
		w.waitHolds(t, time.Now(), 10, 60*time.Second)
		w.finish(t)
		unblocked(t, servers, "fault", "restart", 2*ttl)
	})

	// Lose quorum: no lock is granted while the ensemble cannot commit
	// (ErrUnavailable), a holder's lease ends on its own clock, and after
	// the members return the locks are granted again.
	t.Run("LoseQuorum", func(t *testing.T) {
		c := newClient(t, servers, undeclared)
		p := lockkit.Policy{TTL: ttl, Fencing: true, Retry: retry}
		//lockkit-vet:ignore test: the lease is left to the fault under test or the client's Close
		held, err := lockOf(c, "quorum", p, "held").Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		leader := z.Leader(t, 10*time.Second)
		z.Members[(leader+1)%3].Stop(t)
		z.Members[(leader+2)%3].Stop(t)
		lostQuorum := time.Now()
		// A lone member notices within syncLimit (20 ticks = 2s); from then
		// on nothing may be granted.
		time.Sleep(3 * time.Second)
		window := time.Now()
		attempts, grants := 0, 0
		for time.Since(window) < 5*time.Second {
			attempts++
			l, err := lockOf(c, "quorum", p, "free"+strconv.Itoa(attempts)).TryAcquire(ctxT(t, 10*time.Second))
			if err == nil {
				grants++
				t.Errorf("granted fence %d without quorum", l.Fence())
			} else if !errors.Is(err, lockkit.ErrUnavailable) {
				t.Errorf("acquire without quorum: %v, want ErrUnavailable", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-held.Done():
			if !errors.Is(held.Err(), lockkit.ErrLockLost) {
				t.Errorf("the holder's lease ended with %v, want ErrLockLost", held.Err())
			}
			t.Logf("the holder's lease ended %v after quorum was lost (TTL %v)", held.Deadline().Sub(lostQuorum), ttl)
		default:
			t.Errorf("the holder's lease is still valid %v after quorum was lost (TTL %v)", time.Since(lostQuorum), ttl)
		}
		t.Logf("without quorum: %d attempts, %d grants", attempts, grants)
		healthy(t, z)
		unblocked(t, servers, "quorum", "free1", 4*ttl) // any key works again
		unblocked(t, servers, "quorum", "held", 4*ttl)
	})
}
