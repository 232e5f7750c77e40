package lockkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// replyHold is a go-redis hook on the acquiring client. Once armed, the
// first command that names key runs on the server as usual, and its reply
// is then held until release is closed: delivered late, or (lost) replaced
// by a timeout, as if it never came. With dropRelease, the next command
// that names key (the give-back's release) is not sent at all, and times
// out once Close has started (closing is closed). The store is the real
// one: only the client's view of the wire is delayed.
type replyHold struct {
	key         string
	lost        bool
	dropRelease bool
	armed       atomic.Bool
	seen        atomic.Int32
	held        chan struct{} // closed when the first command's reply is held
	dropped     chan struct{} // closed when the release was dropped
	release     chan struct{}
	closing     chan struct{}
}

func newReplyHold(key string, lost, dropRelease bool) *replyHold {
	h := &replyHold{key: key, lost: lost, dropRelease: dropRelease,
		held: make(chan struct{}), dropped: make(chan struct{}), release: make(chan struct{}), closing: make(chan struct{})}
	h.armed.Store(true)
	return h
}

func (h *replyHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || !slices.Contains(cmd.Args(), any(h.key)) {
			return next(ctx, cmd)
		}
		if h.seen.Load() == 1 && h.dropRelease {
			h.seen.Add(1)
			close(h.dropped)
			<-h.closing
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		err := next(ctx, cmd)
		if h.seen.Load() > 0 || rediswire.IsNoScript(err) {
			return err
		}
		h.seen.Add(1)
		close(h.held)
		<-h.release
		if h.lost {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}

func (h *replyHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCloseRacingAcquisitionInFlight: an acquisition's first command has
// run on the server (its key is now held by the client's token) when Close
// starts, and its reply is held back by the client's wire. Whatever the
// reply then does (comes late, never comes, never comes and the first
// give-back is lost too), Close returns only once no key is held by the
// client's token; and when Close's ctx ends while the reply is still held,
// Close's error names exactly the keys left held. A give-back already
// under way when Close starts (an earlier TryDo's reply lost, its first
// release answered by a timeout only after Close started) is finished too,
// not dropped. For a polling Do, a FIFO Do
// and a DoAll taken in one script.
func TestCloseRacingAcquisitionInFlight(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	type kind struct {
		name   string
		policy Policy
		ids    []string
		run    func(ctx context.Context, retry bool, locks []Lock) error
	}
	noop := func(context.Context, *Lease) error { return nil }
	kinds := []kind{
		{"poll", Policy{TTL: 10 * time.Second, Retry: Retry{Attempts: 100, MaxWait: 20 * time.Second}}, []string{"k"},
			func(ctx context.Context, retry bool, locks []Lock) error {
				if retry {
					return locks[0].Do(ctx, noop)
				}
				return locks[0].TryDo(ctx, noop)
			}},
		{"fifo", fifoPolicy(10*time.Second, 20*time.Second), []string{"k"},
			func(ctx context.Context, _ bool, locks []Lock) error { return locks[0].Do(ctx, noop) }},
		{"doall", Policy{TTL: 10 * time.Second, Retry: Retry{Attempts: 100, MaxWait: 20 * time.Second}}, []string{"a", "b"},
			func(ctx context.Context, retry bool, locks []Lock) error {
				fn := func(context.Context, *LeaseSet) error { return nil }
				if retry {
					return DoAll(ctx, fn, locks[0], locks[1])
				}
				return TryDoAll(ctx, fn, locks[0], locks[1])
			}},
	}
	type mode struct {
		name              string
		lost, dropRelease bool
		ctxFirst          bool // Close's ctx ends while the reply is held
		before            bool // the reply is lost before Close starts
	}
	modes := []mode{
		{name: "late reply"},
		{name: "lost reply", lost: true},
		{name: "lost reply and release", lost: true, dropRelease: true},
		{name: "ctx ends first", ctxFirst: true},
		{name: "give-back under way", lost: true, dropRelease: true, before: true},
	}
	for _, k := range kinds {
		for _, m := range modes {
			if m.before && k.name == "fifo" {
				continue // a FIFO wait keeps its token: no give-back runs before it ends
			}
			t.Run(k.name+"/"+m.name, func(t *testing.T) {
				rdb := r.Client(t)
				c0 := newClientOver(t, rdb)
				d := testDomain(t, c0, k.policy)
				var locks []Lock
				var keys []string
				for _, id := range k.ids {
					locks = append(locks, lockOn(d, id))
					keys = append(keys, lockOn(d, id).Key())
				}
				hook := newReplyHold(keys[0], m.lost, m.dropRelease)
				rdb.AddHook(hook)
				probe := lockOn(testDomain(t, c0, Policy{TTL: 10 * time.Second}), "probe")
				if m.before {
					close(hook.release)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				acq := make(chan error, 1)
				go func() { acq <- k.run(ctx, !m.before, locks) }()
				wait := func(ch <-chan struct{}, what string) {
					t.Helper()
					select {
					case <-ch:
					case <-time.After(10 * time.Second):
						t.Fatalf("%s did not happen", what)
					}
				}
				wait(hook.held, "the acquire's command")
				if m.before {
					// The TryDo has returned ErrUnavailable; its give-back
					// has sent its first release, which times out once
					// Close has started.
					wait(hook.dropped, "the give-back's first release")
					if err := <-acq; !errors.Is(err, ErrUnavailable) {
						t.Fatalf("attempt with a lost reply = %v, want ErrUnavailable", err)
					}
				}
				closeTimeout := 10 * time.Second
				if m.ctxFirst {
					closeTimeout = 300 * time.Millisecond
				}
				cctx, ccancel := context.WithTimeout(context.Background(), closeTimeout)
				defer ccancel()
				closed := make(chan error, 1)
				go func() { closed <- c0.Close(cctx) }()
				// Close has started once a new acquisition is refused.
				for !errors.Is(probe.TryDo(ctx, noop), ErrClosed) {
					time.Sleep(time.Millisecond)
				}
				close(hook.closing)
				var once sync.Once
				let := func() { once.Do(func() { close(hook.release) }) }
				if m.before {
					once.Do(func() {})
				} else if !m.ctxFirst {
					timer := time.AfterFunc(300*time.Millisecond, let)
					defer timer.Stop()
				}
				closeErr := <-closed
				held := heldKeys(t, admin, keys)
				let()
				noNilWrap(t, closeErr)
				if m.ctxFirst {
					if closeErr == nil {
						t.Errorf("Close = nil while %v are held by its token", held)
					} else if named := namedKeys(closeErr, keys); !slices.Equal(named, held) || len(held) == 0 {
						t.Errorf("Close = %v: names %v, but %v are held", closeErr, named, held)
					}
				} else {
					if closeErr != nil {
						t.Errorf("Close = %v, want nil", closeErr)
					}
					if len(held) > 0 {
						t.Errorf("after Close returned nil, %v still held by the closed client's token", held)
					}
				}
				if !m.before {
					select {
					case err := <-acq:
						noNilWrap(t, err)
						if !errors.Is(err, ErrClosed) {
							t.Errorf("acquisition racing Close = %v, want ErrClosed", err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the acquisition did not end")
					}
				}
				if m.dropRelease {
					select {
					case <-hook.dropped:
					default:
						t.Error("no release was dropped: the history did not happen")
					}
				}
				// In every case the keys are given back in the end (not
				// left to their 10s TTL).
				deadline := time.Now().Add(5 * time.Second)
				for len(heldKeys(t, admin, keys)) > 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if left := heldKeys(t, admin, keys); len(left) > 0 {
					t.Errorf("%v still held 5s after the acquisition ended", left)
				}
				if k.name == "fifo" {
					if n := queueLen(t, admin, locks[0]); n != 0 {
						t.Errorf("%d closed tokens still queued", n)
					}
				}
			})
		}
	}
}

// heldKeys are the keys of keys that exist, sorted.
func heldKeys(t *testing.T, rdb *redis.Client, keys []string) []string {
	t.Helper()
	var held []string
	for _, k := range keys {
		n, err := rdb.Exists(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			held = append(held, k)
		}
	}
	slices.Sort(held)
	return held
}

// namedKeys are the keys of keys that err quotes, sorted.
func namedKeys(err error, keys []string) []string {
	var named []string
	for _, k := range keys {
		if strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
			named = append(named, k)
		}
	}
	slices.Sort(named)
	return named
}
