package faultharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/holder"
)

// pushDelayer is a TCP proxy in front of the fifo kind's lock server for one
// worker's connections: it passes every connection through at once, except
// a Pub/Sub subscriber's (one that sent SUBSCRIBE), whose replies (the
// handover pushes) it delivers delay late. It counts the pushes it delayed,
// and the stale ones: those whose token no longer held the lock when the
// push reached the worker (the handover had run out or been used).
//
// lockkit's own TestFIFOLatePushIsNotAGrant delays a waiter's Pub/Sub
// connection with a toxiproxy that its client dials once its pool is warm;
// a worker is another process, so this proxy tells the subscriber apart by
// what it sends instead.
type pushDelayer struct {
	t        testing.TB
	ln       net.Listener
	upstream string
	delay    time.Duration
	admin    *redis.Client // reads the lock at a push's delivery
	lockKey  string

	delayed, stale atomic.Int64
	wg             sync.WaitGroup
	mu             sync.Mutex
	conns          map[net.Conn]struct{}
}

func startPushDelayer(t testing.TB, upstream, lockKey string, delay time.Duration) *pushDelayer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pushDelayer{t: t, ln: ln, upstream: upstream, delay: delay, lockKey: lockKey, conns: map[net.Conn]struct{}{},
		admin: redis.NewClient(&redis.Options{Addr: upstream, ContextTimeoutEnabled: true})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
		p.admin.Close()
	})
	return p
}

func (p *pushDelayer) Addr() string { return p.ln.Addr().String() }

func (p *pushDelayer) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *pushDelayer) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *pushDelayer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, u)
		var sub atomic.Bool
		p.wg.Add(2)
		go func() { // worker -> server: look for SUBSCRIBE
			defer p.wg.Done()
			defer p.untrack(c, u)
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if subscribeCmd.Match(buf[:n]) {
						sub.Store(true)
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server -> worker: a subscriber's replies, delay late
			defer p.wg.Done()
			defer p.untrack(c, u)
			type chunk struct {
				due time.Time
				b   []byte
			}
			late := make(chan chunk, 1024)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ch := range late {
					time.Sleep(time.Until(ch.due))
					p.count(ch.b)
					if _, err := c.Write(ch.b); err != nil {
						for range late {
						}
						return
					}
				}
			}()
			defer func() { close(late); <-done }()
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					if sub.Load() {
						late <- chunk{time.Now().Add(p.delay), bytes.Clone(buf[:n])}
					} else if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// subscribeCmd matches a SUBSCRIBE (SSUBSCRIBE, PSUBSCRIBE) command's name
// in RESP.
var subscribeCmd = regexp.MustCompile(`(?i)\$(9|10)\r\n[sp]?subscribe\r\n`)

// pushMsg matches a push and its payload's first field, the token handed
// the lock (internal/fifo's release: "token fence px prev joined").
var pushMsg = regexp.MustCompile(`\$7\r\nmessage\r\n\$\d+\r\n[^\r]*\r\n\$\d+\r\n([^ \r]+)`)

// count counts the pushes in b, delivered now, and the stale ones.
func (p *pushDelayer) count(b []byte) {
	for _, m := range pushMsg.FindAllSubmatch(b, -1) {
		p.delayed.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := p.admin.Get(ctx, p.lockKey).Result()
		cancel()
		if (err == nil || err == redis.Nil) && !holder.Owns(v, string(m[1])) {
			p.stale.Add(1)
		}
	}
}

func init() { faultFns["pause-head-waiter"] = pauseHeadWaiter }

// pauseHeadWaiter (fifo): SIGSTOP the worker whose waiter is at the head of
// the queue while another holds the lock, so that the release hands the
// lock to it while it is stopped (its push, and for worker 0 a delayed one,
// waits in its socket); keep it stopped until the handover ran out and the
// lock went on, then SIGCONT. Its waiter must rejoin (its Do must not end
// with ErrUnavailable: the server is healthy, MaxWait not spent) and never
// write with the handover's lease (Check, CheckHeldAt). Up to 5 tries for a
// handover while stopped; none is an error (the history did not happen).
func pauseHeadWaiter(r *krun) Fault {
	t := r.t
	rdb := redis.NewClient(&redis.Options{Addr: r.lock.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	key := r.keys[0]
	ctx := t.Context()
	for try := range 5 {
		var (
			w   *workerProc
			tok string
		)
		waitUntil(t, holdFor, "pause-head-waiter: a live worker's waiter at the head, the lock held by another", func() error {
			heads, err := rdb.ZRange(ctx, key+fifo.QueueSuffix, 0, 0).Result()
			if err != nil || len(heads) == 0 {
				return fmt.Errorf("no head (%v)", err)
			}
			desc, err := rdb.HGet(ctx, key+fifo.WaitersSuffix, heads[0]).Result()
			if err != nil {
				return fmt.Errorf("head %s: %v", heads[0], err)
			}
			fields := strings.SplitN(desc, "|", 5)
			_, h, _ := holder.Decode(heads[0] + string(holder.Sep) + fields[len(fields)-1])
			owner, err := rdb.Get(ctx, key).Result()
			if err != nil || holder.Owns(owner, heads[0]) {
				return fmt.Errorf("the lock is not held by another (%q, %v)", owner, err)
			}
			for _, c := range r.live {
				if c.pid != h.PID || c.exited() || c.stopped() {
					continue
				}
				if err := c.signal(syscall.SIGSTOP); err != nil {
					return err
				}
				waitUntil(t, 5*time.Second, "SIGSTOP to take", func() error {
					if !c.stopped() {
						return errors.New("running")
					}
					return nil
				})
				w, tok = c, heads[0]
				return nil
			}
			return fmt.Errorf("head %s is of pid %d, no live running worker", heads[0], h.PID)
		})
		f := Fault{Worker: w.id, Start: time.Now().UnixNano()}
		handed := false
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && !handed {
			v, err := rdb.Get(ctx, key).Result()
			handed = err == nil && holder.Owns(v, tok)
			if !handed {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if handed {
			r.pausedHanded++
			// Stopped until the handover ran out and the lock went on.
			waitUntil(t, resumeBound, "pause-head-waiter: the handover to the stopped waiter to run out", func() error {
				v, err := rdb.Get(ctx, key).Result()
				if err == nil && holder.Owns(v, tok) || err != nil && err != redis.Nil {
					return fmt.Errorf("the lock still %q (%v)", v, err)
				}
				return nil
			})
		}
		if err := w.signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		if !handed {
			t.Logf("pause-head-waiter try %d: worker %d stopped at the head, no handover to it within 3s", try, w.id)
			continue
		}
		f.Note = fmt.Sprintf("handed to %s while stopped; after SIGCONT: %s", tok, r.afterResume(w, f.End))
		return f
	}
	t.Errorf("pause-head-waiter: no handover to a stopped waiter in 5 tries: the history did not happen")
	return Fault{Worker: -1, Start: time.Now().UnixNano()}
}

// afterResume waits for how the stopped worker's wait ended after SIGCONT
// (its history's next grant or acqfail): a grant, or ErrNotAcquired once its
// MaxWait ran out; ErrUnavailable, or nothing within resumeBound, is an
// error: the waiter gave up instead of rejoining.
func (r *krun) afterResume(w *workerProc, since int64) string {
	var got string
	waitUntil(r.t, resumeBound, fmt.Sprintf("worker %d's wait to end after SIGCONT", w.id), func() error {
		evs, err := ReadHistory(w.hist)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.T < since {
				continue
			}
			switch e.Ev {
			case "grant":
				got = "rejoined, granted"
				return nil
			case "acqfail":
				got = "gave up: " + e.Out + ": " + e.Err
				if e.Out == "unavailable" {
					r.t.Errorf("pause-head-waiter: worker %d, stopped while the lock was handed to it, gave up with ErrUnavailable instead of rejoining: %s", w.id, e.Err)
				}
				return nil
			}
		}
		return errors.New("not yet")
	})
	return got
}

// TestCheckHeldAt: a write within its lease's hold passes, one landing
// past the next grant (plus slack) is named, whoever wrote it; a token
// granted again is judged by its later grant; the last grant has no end.
func TestCheckHeldAt(t *testing.T) {
	const lock, fk = "lock:{b}", "lock:{b}:fence"
	grant := func(tok, fence string, pxat int64) [][]string {
		return [][]string{{"MULTI"}, {"SET", lock, tok + ";h", "PXAT", fmt.Sprint(pxat)}, {"SET", fk, fence}, {"EXEC"}}
	}
	var cmds [][]string
	for _, g := range [][][]string{grant("A", "10", 2000), grant("B", "11", 2500), grant("B", "12", 4000), grant("C", "13", 4200)} {
		cmds = append(cmds, g...)
	}
	w := func(tok string, fence, at int64) TimedWrite {
		return TimedWrite{Write: Write{Value: EncodeValue(0, 0, tok, 1), Fence: fence}, At: at}
	}
	// A granted at 1000, B at 1500 (fence 11) and again at 3000 (12), C at 3200.
	ok := []TimedWrite{w("A", 10, 1400), w("A", 10, 1550), w("B", 12, 3100), w("C", 13, 9000), w("B", 11, 1600)}
	if bad := CheckHeldAt(cmds, lock, fk, 0, time.Second, 100*time.Millisecond, ok); len(bad) != 0 {
		t.Fatalf("writes within their holds: %q", bad)
	}
	late := []TimedWrite{w("A", 10, 1700), w("B", 12, 3400)}
	bad := CheckHeldAt(cmds, lock, fk, 0, time.Second, 100*time.Millisecond, late)
	if len(bad) != 2 || !strings.Contains(bad[0], "lease A, fence 10) landed 200ms after the lock server granted the lock to lease B (fence 11): it held no lease then") ||
		!strings.Contains(bad[1], "lease B, fence 12) landed 200ms after") {
		t.Fatalf("late writes: %q", bad)
	}
}
