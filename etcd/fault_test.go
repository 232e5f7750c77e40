package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// The fault tests run on a 3-member cluster: three workers, each a lockkit
// client with its own etcd client on every member, take one fencing lock in
// a loop and write a resource in Redis with their fence (package fence),
// while a paused holder (an acquisition that never renews: a process stopped
// after its grant) holds the lock from before the fault. After each fault:
//   - no two valid leases overlapped: every hold, from fn's start to its
//     end or its local deadline, whichever came first, ends before the next
//     one starts (the paused holder's until its grant's send + TTL);
//   - no fence was granted twice, and fences rise in grant order;
//   - no valid holder's write was fenced off, and the paused holder's late
//     write is;
//   - the cluster grants again.

// hold is one fn run under the lock.
type hold struct {
	called     time.Time // when Do was called
	start, end time.Time
	fence      int64
	who        string
}

type event struct {
	at  time.Time
	who string
	err error
}

type history struct {
	mu     sync.Mutex
	holds  []hold
	errs   map[string]int
	events []event  // failed Do calls, for the log
	fenced []string // valid holders' writes turned away (a violation)
}

func (h *history) add(x hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

func (h *history) outcome(who string, err error) {
	k := "ok"
	switch {
	case err == nil:
	case errors.Is(err, lockkit.ErrLockLost):
		k = "lost"
	case errors.Is(err, lockkit.ErrUnavailable):
		k = "unavailable"
	case errors.Is(err, lockkit.ErrNotAcquired):
		k = "not acquired"
	case errors.Is(err, context.DeadlineExceeded):
		k = "deadline"
	default:
		k = "other: " + err.Error()
	}
	h.mu.Lock()
	h.errs[k]++
	if err != nil {
		h.events = append(h.events, event{time.Now(), who, err})
	}
	h.mu.Unlock()
}

// firstAfter is the first hold whose Do was called after t (ok false when
// none): a grant that the fault could not have preceded.
func (h *history) firstAfter(t time.Time) (hold, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best hold
	ok := false
	for _, x := range h.holds {
		if x.called.After(t) && (!ok || x.start.Before(best.start)) {
			best, ok = x, true
		}
	}
	return best, ok
}

func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.holds)
}

func (h *history) maxFence() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m int64
	for _, x := range h.holds {
		m = max(m, x.fence)
	}
	return m
}

// logEvents logs the failed Do calls between from and to.
func (h *history) logEvents(t *testing.T, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e.at.After(from) && e.at.Before(to) {
			t.Logf("+%v %s: %v", e.at.Sub(from).Round(time.Millisecond), e.who, e.err)
		}
	}
}

// check asserts mutual exclusion and fence order over the whole history.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := slices.Clone(h.holds)
	slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
	seen := map[int64]string{}
	for i, x := range hs {
		if w, dup := seen[x.fence]; dup {
			t.Errorf("fence %d granted twice (%s and %s)", x.fence, w, x.who)
		}
		seen[x.fence] = x.who
		if i == 0 {
			continue
		}
		p := hs[i-1]
		if x.start.Before(p.end) {
			t.Errorf("two valid leases: %s (fence %d) until %s, %s (fence %d) from %s", p.who, p.fence, p.end.Format("15:04:05.000"), x.who, x.fence, x.start.Format("15:04:05.000"))
		}
		if x.fence <= p.fence {
			t.Errorf("fence %d (%s) granted after fence %d (%s)", x.fence, x.who, p.fence, p.who)
		}
	}
	for _, f := range h.fenced {
		t.Errorf("a valid holder's write was fenced off: %s", f)
	}
	t.Logf("%d holds; outcomes %v", len(hs), h.errs)
}

const resource = "fault:resource"

// faultRun runs the workload around fault, which returns when the fault
// began and when it was repaired, then checks the history. It returns the
// history and the fault's times.
func faultRun(t *testing.T, fault func(t *testing.T, c *testserver.EtcdCluster) (began, repaired time.Time)) (*history, time.Time, time.Time) {
	c := testserver.StartEtcd(t, 3)
	rdb := testserver.StartRedis(t).Client(t)
	h := &history{errs: map[string]int{}}
	ctx := ctxT(t, 3*time.Minute)
	p := lockkit.Policy{TTL: ttl, Fencing: true, Retry: lockkit.Retry{Attempts: 1000, Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1.5, Jitter: 0.5, MaxWait: time.Second}}

	// The paused holder: granted, then never renews or releases.
	pbe := openBackend(t, newCli(t, c))
	key := lockOf(newClient(t, c), "fault", p, "x").Key()
	var fP int64
	for {
		sent := time.Now()
		f, err := pbe.Acquire(ctx, &driver.Request{Key: key, Token: "paused", TTL: ttl, Fencing: true})
		if err == nil {
			fP = f
			h.add(hold{called: sent, start: time.Now(), end: sent.Add(ttl), fence: f, who: "paused"})
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the paused holder never got the lock: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		l := lockOf(newClient(t, c), "fault", p, "x")
		who := fmt.Sprint("worker-", w)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				called := time.Now()
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := l.Do(dctx, func(fctx context.Context, lease *lockkit.Lease) error {
					start := time.Now()
					werr := fence.Set(fctx, rdb, resource, who, lease.Fence())
					if errors.Is(werr, fence.ErrFenced) && lease.Valid() {
						h.mu.Lock()
						h.fenced = append(h.fenced, fmt.Sprintf("%s fence %d: %v", who, lease.Fence(), werr))
						h.mu.Unlock()
					}
					time.Sleep(20 * time.Millisecond)
					end := time.Now()
					if d := lease.Deadline(); d.Before(end) {
						end = d
					}
					h.add(hold{called: called, start: start, end: end, fence: lease.Fence(), who: who})
					return nil
				})
				cancel()
				h.outcome(who, err)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})

	// The paused holder's lease expires and the workers take turns: the
	// fault strikes a busy lock.
	for h.maxFence() <= fP || h.count() < 5 {
		if ctx.Err() != nil {
			t.Fatalf("the workers never got the lock after the paused holder's TTL; outcomes %v", h.errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	began, repaired := fault(t, c)

	// The cluster grants again, to a worker, after the repair.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, ok := h.firstAfter(repaired); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant within 60s of the repair; outcomes %v", h.errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	// The paused holder wakes up and writes with its old fence.
	if err := fence.Set(ctxT(t, 5*time.Second), rdb, resource, "paused", fP); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("the paused holder's late write (fence %d): %v, want fence.ErrFenced", fP, err)
	}
	v, f, err := fence.Get(ctxT(t, 5*time.Second), rdb, resource)
	if err != nil || v == "paused" || f <= fP {
		t.Errorf("resource = %q fence %d (%v); the paused holder's fence is %d", v, f, err, fP)
	}
	h.check(t)
	return h, began, repaired
}

// kill -9 the leader: the lease of the holder lives on in the new leader
// (leases are kept in the replicated state); the time until a worker is
// granted the lock again is logged.
func TestFaultKillLeader(t *testing.T) {
	h, began, _ := faultRun(t, func(t *testing.T, c *testserver.EtcdCluster) (time.Time, time.Time) {
		i := c.Leader(t, 10*time.Second)
		began := time.Now()
		c.Members[i].Kill(t)
		t.Logf("killed the leader %s", c.Members[i].Name)
		time.Sleep(3 * time.Second)
		return began, time.Now()
	})
	if x, ok := h.firstAfter(began); ok {
		t.Logf("time to grant again after the leader was killed: %v (fence %d)", x.start.Sub(began).Round(time.Millisecond), x.fence)
		h.logEvents(t, began, x.start)
	}
}

// SIGSTOP the leader for longer than the TTL: the others elect a leader;
// leases granted by the stopped one are neither honoured past their TTL nor
// granted twice when it wakes.
func TestFaultPauseLeader(t *testing.T) {
	h, began, _ := faultRun(t, func(t *testing.T, c *testserver.EtcdCluster) (time.Time, time.Time) {
		i := c.Leader(t, 10*time.Second)
		began := time.Now()
		c.Members[i].Pause(t)
		time.Sleep(ttl + 2*time.Second)
		c.Members[i].Resume(t)
		return began, time.Now()
	})
	if x, ok := h.firstAfter(began); ok {
		t.Logf("time to grant again after the leader was paused: %v", x.start.Sub(began).Round(time.Millisecond))
	}
}

// Restart a follower (SIGTERM, start again with its data).
func TestFaultRestartMember(t *testing.T) {
	faultRun(t, func(t *testing.T, c *testserver.EtcdCluster) (time.Time, time.Time) {
		i := (c.Leader(t, 10*time.Second) + 1) % len(c.Members)
		began := time.Now()
		c.Members[i].Restart(t)
		return began, time.Now()
	})
}

// Restart the whole cluster: fences keep rising across it (the revision is
// durable), and nobody holds the lock twice.
func TestFaultRestartCluster(t *testing.T) {
	faultRun(t, func(t *testing.T, c *testserver.EtcdCluster) (time.Time, time.Time) {
		began := time.Now()
		c.RestartAll(t)
		return began, time.Now()
	})
}

// Lose quorum (stop two of three members): no lease is granted while the
// cluster cannot commit; acquisitions fail with ErrUnavailable (the breaker
// fails closed), and the cluster grants again once a member is back.
func TestFaultQuorumLoss(t *testing.T) {
	var lost, back time.Time
	var probe error
	h, _, _ := faultRun(t, func(t *testing.T, c *testserver.EtcdCluster) (time.Time, time.Time) {
		i := c.Leader(t, 10*time.Second)
		a, b := (i+1)%3, (i+2)%3
		began := time.Now()
		c.Members[a].Stop(t)
		c.Members[b].Stop(t)
		lost = time.Now()
		time.Sleep(ttl + time.Second)
		// A fresh client, on the surviving member only, asks once.
		cl := newClientOn(t, c.Members[i].Endpoint())
		l := lockOf(cl, "fault", lockkit.Policy{TTL: ttl, Fencing: true}, "x")
		var lease *lockkit.Lease
		lease, probe = l.TryAcquire(ctxT(t, 10*time.Second))
		if lease != nil {
			if err := lease.Release(ctxT(t, 5*time.Second)); err != nil {
				t.Logf("releasing a lease granted without quorum: %v", err)
			}
		}
		time.Sleep(time.Second)
		back = time.Now()
		c.Members[a].Start(t)
		c.Members[b].Start(t)
		return began, time.Now()
	})
	if !errors.Is(probe, lockkit.ErrUnavailable) {
		t.Errorf("an acquire without quorum: %v, want ErrUnavailable", probe)
	}
	// A grant committed just before the second member stopped may still
	// reach its fn right after: half a second of grace.
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.holds {
		if x.start.After(lost.Add(500*time.Millisecond)) && x.start.Before(back) {
			t.Errorf("granted without quorum: %s fence %d at %s (quorum lost %s, back %s)", x.who, x.fence, x.start.Format("15:04:05.000"), lost.Format("15:04:05.000"), back.Format("15:04:05.000"))
		}
	}
	if h.errs["unavailable"] == 0 {
		t.Errorf("no ErrUnavailable while quorum was lost: outcomes %v", h.errs)
	}
}
