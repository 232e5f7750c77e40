package lockkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// Issue 30, the paused waiter, for real: a waiter process W (this test
// binary re-executed) is queued, then stopped with SIGSTOP; the holder
// releases, which hands the lock to W while it is stopped. The handover
// expires, the next waiter X takes the lock and runs fn, and W is continued
// while X is inside fn. W must not run fn then (no two valid leases: X's fn
// checks the key holds its token throughout, W's fn checks the key holds
// W's token and its lease is valid), and W must not give up: it rejoins the
// queue and gets the lock after X, its Do returning nil. On 86b40f9 W either
// trusted the stale handover (fn ran with a valid lease while X held the
// lock) or returned ErrUnavailable ("the handed-over lock expired").
func TestFIFOPausedWaiterProcess(t *testing.T) {
	if addr := os.Getenv("LOCKKIT_PAUSED_WAITER"); addr != "" {
		pausedWaiter(addr, os.Getenv("LOCKKIT_PAUSED_WAITER_PREFIX"))
		return
	}
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	const ttl = time.Second
	p := fifoPolicy(ttl, 20*time.Second)
	hc, xc := newClient(t, r), newClient(t, r)
	for round := range 3 {
		id := fmt.Sprint("k", round)
		hl := lockOn(fifoDomain(t, hc, p), id)
		xl := lockOn(fifoDomain(t, xc, p), id)
		h, err := hl.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		child := testserver.StartChild(t, "^TestFIFOPausedWaiterProcess$",
			"LOCKKIT_PAUSED_WAITER="+r.Addr(), "LOCKKIT_PAUSED_WAITER_PREFIX=lock:"+t.Name()+":", "LOCKKIT_PAUSED_WAITER_ID="+id)
		if l := child.Next(t); l != "started" {
			t.Fatalf("child: %q", l)
		}
		waitQueueLen(t, rdb, hl, 1) // W is queued
		child.Signal(t, syscall.SIGSTOP)
		var (
			xIn                     atomic.Bool
			xStart, xCheck, xEnd    atomic.Int64 // X's fn: its start, its last check, its end (UnixNano)
			released, resumed, read int64        // H's release, the SIGCONT, W's line read
		)
		xErr := make(chan error, 1)
		go func() {
			xErr <- xl.Do(context.Background(), func(ctx context.Context, lease *Lease) error {
				xStart.Store(time.Now().UnixNano())
				xIn.Store(true)
				defer func() {
					xEnd.Store(time.Now().UnixNano())
					xIn.Store(false)
				}()
				for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
					if v := rdb.Get(ctx, xl.Key()).Val(); tokenOf(v) != lease.Token() {
						return fmt.Errorf("X inside fn: the key holds %q, not X's token", v)
					}
					xCheck.Store(time.Now().UnixNano())
				}
				return nil
			})
		}()
		waitQueueLen(t, rdb, hl, 2) // X queued behind W
		released = time.Now().UnixNano()
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The handover to the stopped W expires (TTL); X takes the lock.
		pollFor(t, 10*time.Second, "X inside fn", func() bool {
			select {
			case err := <-xErr:
				t.Fatalf("X's Do returned before W was continued: %v", err)
			default:
			}
			return xIn.Load()
		})
		time.Sleep(200 * time.Millisecond)
		resumed = time.Now().UnixNano()
		child.Signal(t, syscall.SIGCONT)
		line := child.Next(t)
		read = time.Now().UnixNano()
		inX := xIn.Load()
		// W's line is "in fn own" and the time W read the key (UnixNano).
		what, at, _ := strings.Cut(line, " @")
		if what != "in fn own" {
			t.Errorf("round %d: W entered fn with %q (X inside fn: %v), want its own valid lease", round, line, inX)
		} else if inX {
			// Times from H's release, in ms, for the history.
			ms := func(ns int64) string {
				if ns == 0 {
					return "-"
				}
				return fmt.Sprintf("%.1f", float64(ns-released)/1e6)
			}
			wAt, _ := strconv.ParseInt(at, 10, 64)
			t.Errorf("round %d: W ran fn while X was inside its fn; ms after H's release: X's fn from %s, its last check %s, its end %s; SIGCONT %s; W read its token %s; W's line read %s",
				round, ms(xStart.Load()), ms(xCheck.Load()), ms(xEnd.Load()), ms(resumed), ms(wAt), ms(read))
		}
		if got := child.Next(t); got != "result <nil>" {
			t.Errorf("round %d: W's Do: %q, want nil (it rejoins and waits on)", round, got)
		}
		if err := <-xErr; err != nil {
			t.Errorf("round %d: X's Do: %v", round, err)
		}
		_ = child.Wait(t, 10*time.Second)
	}
}

// pausedWaiter is the child process of TestFIFOPausedWaiterProcess.
func pausedWaiter(addr, prefix string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := New(goredis.New(rdb))
	if err != nil {
		fmt.Println("error " + err.Error())
		os.Exit(0)
	}
	d := c.Domain(DomainSpec{Name: "test", Prefix: prefix, Policy: fifoPolicy(time.Second, 20*time.Second)})
	fmt.Println("started")
	err = lockOn(d, os.Getenv("LOCKKIT_PAUSED_WAITER_ID")).Do(context.Background(), func(ctx context.Context, lease *Lease) error {
		v := rdb.Get(ctx, lease.Key()).Val()
		if tokenOf(v) == lease.Token() {
			v = lease.Token()
		}
		switch {
		case lease.Err() != nil:
			fmt.Println("in fn with", lease.Err())
		case v != lease.Token():
			fmt.Printf("in fn stale: the key holds %q\n", v)
		default:
			fmt.Printf("in fn own @%d\n", time.Now().UnixNano())
		}
		return nil
	})
	fmt.Println("result", fmt.Sprint(err))
	_ = c.Close(context.Background())
	os.Exit(0)
}

// tokenOf is the token of a lock's value (holder's format).
func tokenOf(v string) string {
	tok, _, _ := holder.Decode(v)
	return tok
}
