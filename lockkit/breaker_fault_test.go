package lockkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Breaker tests with real faults: a real redis-server killed and restarted,
// frozen with SIGSTOP and thawed, and slowed by a latency proxy. The settings
// are small so that each test takes a second or two: trip after 3 failures,
// stay open 300ms, 200ms per command.
const (
	faultTrip       = 3
	faultOpen       = 300 * time.Millisecond
	faultCmdTimeout = 200 * time.Millisecond
)

func faultSettings(rec *transitionLog) breaker.Settings {
	return breaker.Settings{ConsecutiveFailures: faultTrip, OpenTimeout: faultOpen, OnStateChange: rec.record}
}

// Kill the server under a steady stream of acquisitions: the breaker opens
// after its threshold, acquisitions then fail fast and none succeeds while
// the server is down; Restart on the same port: half-open, closed, and the
// same client acquires again.
func TestBreakerKillRestart(t *testing.T) {
	r := testserver.StartRedis(t)
	rec := &transitionLog{}
	c := newClient(t, r, WithCommandTimeout(faultCmdTimeout), WithBreaker(faultSettings(rec)))
	runFault(t, c, rec, faultPlan{
		node:   r.Addr(),
		inject: func(t *testing.T) { r.Kill(t) },
		heal:   func(t *testing.T) { r.Restart(t) },
		redial: true,
	})
}

// Freeze the server with SIGSTOP: connections stay open and commands time
// out; those timeouts are failures and open the breaker. SIGCONT: recovery.
func TestBreakerStopContinue(t *testing.T) {
	r := testserver.StartRedis(t)
	rec := &transitionLog{}
	c := newClient(t, r, WithCommandTimeout(faultCmdTimeout), WithBreaker(faultSettings(rec)))
	runFault(t, c, rec, faultPlan{
		node:     r.Addr(),
		inject:   func(t *testing.T) { r.Pause(t) },
		heal:     func(t *testing.T) { r.Resume(t) },
		timeouts: true,
	})
}

// Slow the server through a latency proxy: replies 800ms late, past the
// 200ms command timeout, are failures and open the breaker; a delay under
// the timeout is not. Remove the latency: recovery.
func TestBreakerLatencyProxy(t *testing.T) {
	r := testserver.StartRedis(t)
	proxy := startToxiproxy(t, r.Addr())
	rec := &transitionLog{}
	rdb := r.Client(t, func(o *redis.Options) { o.Addr = proxy.Listen })
	c := newClientOver(t, rdb, WithCommandTimeout(faultCmdTimeout), WithBreaker(faultSettings(rec)))
	if h := c.Health(t.Context()); !h.Healthy || h.Backend != proxy.Listen {
		t.Fatalf("through the proxy: %+v", h)
	}

	// Slow but within the command timeout: every acquisition succeeds.
	addLatency(t, proxy, "mild", 40*time.Millisecond)
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	for i := range 5 {
		lease, err := lockOn(d, "mild-"+strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("40ms latency, 200ms command timeout: acquisition %d = %v", i, err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	removeToxic(t, proxy, "mild")
	if got := rec.String(); got != "" {
		t.Fatalf("latency under the command timeout changed the breaker: %s", got)
	}

	runFault(t, c, rec, faultPlan{
		node:     proxy.Listen,
		inject:   func(t *testing.T) { addLatency(t, proxy, "slow", 800*time.Millisecond) },
		heal:     func(t *testing.T) { removeToxic(t, proxy, "slow") },
		timeouts: true,
	})
}

// An open breaker refuses acquisitions even when the server is up again,
// at once and without retrying, and sends nothing: Redis stays empty. A
// lease taken before the fault is renewed and released regardless, since
// renewals and releases do not go through the breaker.
func TestBreakerOpenRefusesButRenewsAndReleases(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithAppendOnly()) // the held key survives Kill
	rec := &transitionLog{}
	c := newClient(t, r, WithCommandTimeout(faultCmdTimeout),
		WithBreaker(breaker.Settings{ConsecutiveFailures: faultTrip, OpenTimeout: time.Hour, OnStateChange: rec.record}))
	retrying := Policy{TTL: 30 * time.Second, Retry: Retry{Attempts: 50, Initial: 200 * time.Millisecond, MaxWait: 3 * time.Second}}
	d := testDomain(t, c, retrying)
	held, err := lockOn(d, "held").Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	r.Kill(t)
	tripBreaker(t, d, r.Addr())
	r.Restart(t)
	rdb := r.Client(t)
	if got := rdb.Get(t.Context(), held.Key()).Val(); !holder.Owns(got, held.Token()) {
		t.Fatalf("after restart the held key holds %q, want the lease's token (append-only file)", got)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Fatalf("server restarted, Ping = %v", err)
	}

	fresh := lockOn(d, "fresh")
	ran := false
	for name, try := range map[string]func() error{
		"TryAcquire": func() error { _, err := fresh.TryAcquire(t.Context()); return err },
		"Acquire":    func() error { _, err := fresh.Acquire(t.Context()); return err },
		"TryDo": func() error {
			return fresh.TryDo(t.Context(), func(context.Context, *Lease) error { ran = true; return nil })
		},
		"Do": func() error {
			return fresh.Do(t.Context(), func(context.Context, *Lease) error { ran = true; return nil })
		},
	} {
		err := try()
		wantOpenError(t, err, r.Addr())
		if !strings.Contains(err.Error(), "after 1 attempt(s)") {
			t.Fatalf("%s with a retry policy, breaker open: %v, want it to give up after 1 attempt (no backoff)", name, err)
		}
	}
	if ran {
		t.Fatal("fn ran while the breaker was open")
	}
	if n := rdb.Exists(t.Context(), fresh.Key(), fresh.Key()+fenceSuffix).Val(); n != 0 {
		t.Fatalf("refused acquisitions wrote %d key(s) to Redis", n)
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 1 {
		t.Fatalf("Redis holds %d keys, want only the held lease's", n)
	}

	// Renewal and release bypass the open breaker.
	if err := rdb.PExpire(t.Context(), held.Key(), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := held.Extend(t.Context()); err != nil {
		t.Fatalf("extend while the breaker is open: %v", err)
	}
	if pttl := rdb.PTTL(t.Context(), held.Key()).Val(); pttl < 10*time.Second {
		t.Fatalf("after extend the key's TTL is %v, want it reset to about 30s", pttl)
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatalf("release while the breaker is open: %v", err)
	}
	if n := rdb.Exists(t.Context(), held.Key()).Val(); n != 0 {
		t.Fatal("the released key is still in Redis")
	}
	if got := rec.current(); got != breaker.StateOpen {
		t.Fatalf("breaker %v after extend and release, want still open: they must not feed it", got)
	}
	_, err = lockOn(d, "after").TryAcquire(t.Context())
	wantOpenError(t, err, r.Addr())
	rec.wantSequence(t, "closed>open")
}

// A lease held across a SIGSTOP shorter than its TTL survives: the renewal
// due during the stop fails, the next one after SIGCONT succeeds although
// the breaker (tripped by acquisitions during the stop) is still open and
// still refuses acquisitions; Do returns nil.
func TestBreakerLeaseSurvivesShortStop(t *testing.T) {
	r := testserver.StartRedis(t)
	rec := &transitionLog{}
	const ttl = 1500 * time.Millisecond // renewed every 500ms
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond),
		WithBreaker(breaker.Settings{ConsecutiveFailures: faultTrip, OpenTimeout: time.Minute, OnStateChange: rec.record}))
	d := testDomain(t, c, Policy{TTL: ttl})
	rdb := r.Client(t)
	err := lockOn(d, "held").Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		first := lease.Deadline()
		r.Pause(t)
		stopped := time.Now()
		tripBreaker(t, d, r.Addr())
		// Stay stopped past the first renewal (due 500ms after the
		// acquisition, timing out 100ms later), well short of the TTL.
		time.Sleep(time.Until(stopped.Add(750 * time.Millisecond)))
		r.Resume(t)
		resumed := time.Now()
		for lease.Deadline().Equal(first) {
			if ctx.Err() != nil {
				return fmt.Errorf("lease lost %v after SIGCONT: %w", time.Since(resumed), context.Cause(ctx))
			}
			if time.Now().After(first) {
				return errors.New("no renewal succeeded before the first deadline")
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("stopped %v; first renewal after SIGCONT succeeded %v later; deadline moved %v",
			resumed.Sub(stopped).Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond), lease.Deadline().Sub(first).Round(time.Millisecond))
		if got := rdb.Get(ctx, lease.Key()).Val(); !holder.Owns(got, lease.Token()) {
			t.Errorf("after the stop the key holds %q, want the lease's token", got)
		}
		if got := rec.current(); got != breaker.StateOpen {
			t.Errorf("breaker %v when the renewal succeeded, want open (renewals bypass it)", got)
		}
		_, err := lockOn(d, "other").TryAcquire(ctx)
		wantOpenError(t, err, r.Addr())
		h := serveHealth(t, c)
		if st := wantUnhealthy(t, h); st != "open" || !strings.Contains(h.Error, "open") {
			t.Errorf("server back, breaker open: health %s", h.Body)
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil: the lease should survive a stop shorter than its TTL", err)
	}
	rec.wantSequence(t, "closed>open")
}

// A SIGSTOP longer than the TTL loses the lease at its local deadline, even
// while the breaker is open: fn's ctx is cancelled with ErrLockLost and Do
// returns it. Afterwards another client gets the lock.
func TestBreakerLeaseLostLongStop(t *testing.T) {
	r := testserver.StartRedis(t)
	rec := &transitionLog{}
	const ttl = 600 * time.Millisecond
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond),
		WithBreaker(breaker.Settings{ConsecutiveFailures: faultTrip, OpenTimeout: time.Minute, OnStateChange: rec.record}))
	d := testDomain(t, c, Policy{TTL: ttl})
	l := lockOn(d, "held")
	var stateAtLoss breaker.State
	err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		r.Pause(t)
		defer r.Resume(t)
		tripBreaker(t, d, r.Addr())
		select {
		case <-ctx.Done():
		case <-time.After(10 * ttl):
			return errors.New("the lease outlived a stop of 10×TTL")
		}
		stateAtLoss = rec.current()
		if late := time.Since(lease.Deadline()); late < 0 {
			t.Errorf("lost %v before its deadline", -late)
		}
		return context.Cause(ctx)
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
	if stateAtLoss != breaker.StateOpen {
		t.Fatalf("breaker %v when the lease was lost, want open", stateAtLoss)
	}
	other := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl}), "held")
	lease, err := other.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("another client, after the lost lease's TTL: %v", err)
	}
	lease.Release(t.Context())
}

// The fail-fast path: the server is dead and the breaker open, so every
// TryAcquire is refused before anything is sent. The breaker is tripped
// before the sub-benchmark starts, so go-redis's dial-failure log lines do
// not break the result line.
//
//	go test -run '^$' -bench AcquireBreakerOpen -benchmem ./lockkit/
func BenchmarkAcquireBreakerOpen(b *testing.B) {
	r := testserver.StartRedis(b)
	c, err := New(goredis.New(r.Client(b)), WithLogger(slog.New(slog.DiscardHandler)), WithCommandTimeout(faultCmdTimeout),
		WithBreaker(breaker.Settings{ConsecutiveFailures: faultTrip, OpenTimeout: time.Hour}))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	l := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}}).Key(8).Literal("bench:").String("x").Lock()
	ctx := context.Background()
	r.Kill(b)
	for range faultTrip {
		if _, err := l.TryAcquire(ctx); errors.Is(err, breaker.ErrOpen) || !errors.Is(err, ErrUnavailable) {
			b.Fatalf("tripping: %v", err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let the failed attempts' background releases fail (and log)
	b.Run("server=dead", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.TryAcquire(ctx); !errors.Is(err, breaker.ErrOpen) {
				b.Fatal(err)
			}
		}
	})
}

// faultPlan is one kind of fault for runFault.
type faultPlan struct {
	node     string             // the breaker's name: the address the client dials
	inject   func(t *testing.T) // make the node fail
	heal     func(t *testing.T) // make it well again
	timeouts bool               // the failures that reach the node are command timeouts
	// redial: the node came back on a new process, to which go-redis dials
	// anew. Once PoolSize dials in a row failed, go-redis's pool answers
	// every new connection with its last dial error, without dialing, until
	// its own probe (once a second) dials again. An acquisition whose dial
	// was in flight when the server came back succeeds and closes the
	// breaker; the next ones can still get "connection refused" and open it
	// once more. So one more open-close course is allowed, if it opened
	// within a probe period of the first close, and each of its errors was a
	// refused dial.
	redial bool
}

// Phases of a fault run, as seen by the acquisition stream.
const (
	phaseBefore  int32 = iota // healthy
	phaseDown                 // inject returned; heal not begun
	phaseHealing              // heal running
	phaseAfter                // heal returned
)

// runFault drives a stream of acquisitions through a fault and checks the
// breaker's whole course: closed while healthy; open after the threshold;
// while the node is down no acquisition succeeds, every one is
// ErrUnavailable (never ErrNotAcquired), and after the breaker opened only
// half-open probes reach the node, the rest fail fast; after healing
// half-open, then closed, and the same client acquires again. The health
// handler follows: 200, 503, 200.
func runFault(t *testing.T, c *Client, rec *transitionLog, p faultPlan) {
	t.Helper()
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	wantHealthy(t, serveHealth(t, c), "closed")

	s := startStream(t, d, 4)
	pollFor(t, 5*time.Second, "acquisitions succeeding before the fault", func() bool { return s.successes(phaseBefore) >= 20 })

	injectStart := time.Now()
	p.inject(t)
	s.phase.Store(phaseDown)
	pollFor(t, 5*time.Second, "breaker open", func() bool { return rec.current() == breaker.StateOpen })
	// Stay down for a few OpenTimeouts, so that half-open probes fail too.
	for range 3 {
		h := serveHealth(t, c)
		if st := wantUnhealthy(t, h); st != "open" && st != "half_open" {
			t.Fatalf("node down, breaker tripped: health says breaker %q: %s", st, h.Body)
		}
		time.Sleep(faultOpen)
	}

	s.phase.Store(phaseHealing)
	healStart := time.Now()
	p.heal(t)
	s.phase.Store(phaseAfter)
	pollFor(t, 10*time.Second, "breaker closed and acquisitions succeeding after healing", func() bool {
		return rec.current() == breaker.StateClosed && s.successes(phaseAfter) >= 10
	})
	s.halt()
	wantHealthy(t, serveHealth(t, c), "closed")

	// The breaker's course.
	course := "closed>open(,open>half_open,half_open>open)*,open>half_open,half_open>closed"
	if p.redial {
		if closed, reopened, again := rec.wantRedialCourse(t, course); again {
			// What opened it again were refused dials, nothing else.
			refused := 0
			for _, o := range s.outcomes() {
				end := o.start.Add(o.dur)
				if o.err == nil || errors.Is(o.err, breaker.ErrOpen) || !end.After(closed) || end.After(reopened) {
					continue
				}
				if !errors.Is(o.err, syscall.ECONNREFUSED) {
					t.Fatalf("between the breaker's first close and its last reopening an acquisition failed with %v, not a refused dial", o.err)
				}
				refused++
			}
			t.Logf("the breaker opened again up to %v after it first closed, on go-redis's last dial error (%d acquisitions refused a dial in between)", reopened.Sub(closed), refused)
		}
	} else {
		rec.wantSequence(t, course)
	}
	opened := rec.firstAt(breaker.StateOpen)
	if opened.Before(injectStart) {
		t.Fatalf("breaker opened before the fault")
	}
	if closed := rec.lastAt(); closed.Before(healStart) {
		t.Fatalf("breaker closed before the node was healed")
	}
	probes := rec.countBefore(breaker.StateOpen, breaker.StateHalfOpen, healStart)

	var (
		downTotal, downOK, fastFails, reached int
		beforeOpen                            int // failures that reached the node before it opened
		fast                                  []time.Duration
	)
	for _, o := range s.outcomes() {
		if o.err != nil && (!errors.Is(o.err, ErrUnavailable) || errors.Is(o.err, ErrNotAcquired)) {
			t.Fatalf("acquisition in phase %d→%d: %v, want ErrUnavailable and never ErrNotAcquired", o.phase0, o.phase1, o.err)
		}
		isOpen := errors.Is(o.err, breaker.ErrOpen)
		if isOpen {
			wantOpenError(t, o.err, p.node)
		}
		if o.err != nil && !isOpen && o.start.Before(opened) {
			beforeOpen++
		}
		if o.phase0 != phaseDown || o.phase1 != phaseDown {
			continue
		}
		downTotal++
		switch {
		case o.err == nil:
			downOK++
		case isOpen:
			fastFails++
			fast = append(fast, o.dur)
		default:
			if p.timeouts && !isCmdTimeout(o.err) {
				t.Fatalf("node down: %v, want a command timeout", o.err)
			}
			if o.start.After(opened) {
				reached++
			}
		}
	}
	t.Logf("while down: %d acquisitions, %d succeeded, %d failed fast, %d reached the node after it opened (%d half-open periods)",
		downTotal, downOK, fastFails, reached, probes)
	if downOK != 0 {
		t.Fatalf("%d acquisitions succeeded while the node was down, want 0", downOK)
	}
	if fastFails == 0 {
		t.Fatal("no acquisition failed fast (ErrOpen) while the node was down")
	}
	if beforeOpen < faultTrip {
		t.Fatalf("the breaker opened after %d failures, before its threshold %d", beforeOpen, faultTrip)
	}
	if reached > probes {
		t.Fatalf("%d acquisitions reached the node after the breaker opened, more than its %d half-open probes", reached, probes)
	}
	slices.Sort(fast)
	t.Logf("breaker open: median fail-fast %.1f µs over %d acquisitions (p99 %.1f µs)",
		float64(fast[len(fast)/2].Nanoseconds())/1e3, len(fast), float64(fast[len(fast)*99/100].Nanoseconds())/1e3)
}

// acqStream is a steady stream of acquisitions: workers goroutines, each
// taking and at once releasing a key of its own (never contended), until
// halted or 30s have passed.
type acqStream struct {
	phase atomic.Int32
	ok    [phaseAfter + 1]atomic.Int64 // successes that began and ended in one phase
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	mu    sync.Mutex
	out   []acqOutcome
}

type acqOutcome struct {
	phase0, phase1 int32 // the phase when the acquisition began and when it returned
	start          time.Time
	dur            time.Duration
	err            error
}

func startStream(t *testing.T, d *Domain, workers int) *acqStream {
	s := &acqStream{stop: make(chan struct{})}
	ctx := t.Context()
	deadline := time.Now().Add(30 * time.Second)
	for w := range workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for i := 0; time.Now().Before(deadline); i++ {
				l := lockOn(d, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i))
				p0 := s.phase.Load()
				start := time.Now()
				lease, err := l.TryAcquire(ctx)
				dur := time.Since(start)
				p1 := s.phase.Load()
				s.mu.Lock()
				s.out = append(s.out, acqOutcome{p0, p1, start, dur, err})
				s.mu.Unlock()
				if err == nil {
					if p0 == p1 {
						s.ok[p0].Add(1)
					}
					_ = lease.Release(ctx)
				}
				select {
				case <-s.stop:
					return
				case <-tick.C:
				}
			}
		}()
	}
	t.Cleanup(s.halt)
	return s
}

// halt stops the stream and waits for its workers.
func (s *acqStream) halt() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

func (s *acqStream) successes(phase int32) int64 { return s.ok[phase].Load() }

func (s *acqStream) outcomes() []acqOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.out)
}

// tripBreaker opens node's breaker with acquisitions that fail because the
// node is down, and checks the next one is refused by the breaker.
func tripBreaker(t *testing.T, d *Domain, node string) {
	t.Helper()
	// A timeout the breaker ignored as this process's own starvation (a
	// loaded machine: a dial to the dead node that outlived the command
	// timeout) is not one of the failures that trip it.
	starved0 := circuit.StarvedTimeouts()
	for i := 0; ; i++ {
		_, err := lockOn(d, "trip-"+strconv.Itoa(i)).TryAcquire(t.Context())
		if errors.Is(err, breaker.ErrOpen) {
			wantOpenError(t, err, node)
			if ignored := int(circuit.StarvedTimeouts() - starved0); i != faultTrip+ignored {
				t.Fatalf("the breaker opened after %d failures (%d ignored as starvation), want %d counted", i, ignored, faultTrip)
			}
			return
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("tripping acquisition %d = %v, want a backend failure", i, err)
		}
		if i > 10*faultTrip {
			t.Fatalf("the breaker did not open after %d failures", i)
		}
	}
}

// wantOpenError checks an acquisition refused by node's open breaker.
func wantOpenError(t *testing.T, err error, node string) {
	t.Helper()
	var oe *breaker.OpenError
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, breaker.ErrOpen) || errors.Is(err, ErrNotAcquired) || !errors.As(err, &oe) {
		t.Fatalf("acquisition = %v, want ErrUnavailable and breaker.ErrOpen, not ErrNotAcquired", err)
	}
	if oe.Name != node || !strings.Contains(err.Error(), "circuit for "+strconv.Quote(node)) || !strings.Contains(err.Error(), "open") {
		t.Fatalf("acquisition = %v, want it to say %s's circuit is open", err, node)
	}
}

func isCmdTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// transitionLog records a client's breaker state changes (OnStateChange).
type transitionLog struct {
	mu   sync.Mutex
	list []brTransition
}

type brTransition struct {
	from, to breaker.State
	at       time.Time
}

func (l *transitionLog) record(_ string, from, to breaker.State) {
	l.mu.Lock()
	l.list = append(l.list, brTransition{from, to, time.Now()})
	l.mu.Unlock()
}

// current is the state after the last recorded change. An open breaker
// whose OpenTimeout has passed turns half-open only when next asked.
func (l *transitionLog) current() breaker.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) == 0 {
		return breaker.StateClosed
	}
	return l.list[len(l.list)-1].to
}

func (l *transitionLog) lastAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) == 0 {
		return time.Time{}
	}
	return l.list[len(l.list)-1].at
}

func (l *transitionLog) firstAt(to breaker.State) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tr := range l.list {
		if tr.to == to {
			return tr.at
		}
	}
	return time.Time{}
}

func (l *transitionLog) countBefore(from, to breaker.State, before time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, tr := range l.list {
		if tr.from == from && tr.to == to && tr.at.Before(before) {
			n++
		}
	}
	return n
}

// String lists the changes as "closed>open,open>half_open,…".
func (l *transitionLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	parts := make([]string, len(l.list))
	for i, tr := range l.list {
		parts[i] = tr.from.String() + ">" + tr.to.String()
	}
	return strings.Join(parts, ",")
}

// wantSequence checks the whole list of changes against a regular
// expression over String's form.
func (l *transitionLog) wantSequence(t *testing.T, pattern string) {
	t.Helper()
	got := l.String()
	if !regexp.MustCompile("^(?:" + pattern + ")$").MatchString(got) {
		t.Fatalf("breaker state changes:\n  %s\nwant %s", strings.ReplaceAll(got, ",", "\n  "), pattern)
	}
	t.Logf("breaker state changes: %s", got)
}

// wantRedialCourse is wantSequence for a node that came back on a new
// process (faultPlan.redial): course, then more courses only while go-redis
// may still answer with its last dial error: each reopening within its dial
// probe period (1 s, plus as much again for a loaded machine) of the first close.
// again reports such courses, with the first close and the last reopening.
func (l *transitionLog) wantRedialCourse(t *testing.T, course string) (closed, reopened time.Time, again bool) {
	t.Helper()
	re := regexp.MustCompile("^(?:" + course + ")(?P<again>(?:,(?:" + course + "))*)$")
	got := l.String()
	m := re.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("breaker state changes:\n  %s\nwant %s, then again only while go-redis answers its last dial error", strings.ReplaceAll(got, ",", "\n  "), course)
	}
	t.Logf("breaker state changes: %s", got)
	if m[re.SubexpIndex("again")] == "" {
		return time.Time{}, time.Time{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tr := range l.list {
		switch {
		case tr.to == breaker.StateClosed && closed.IsZero():
			closed = tr.at
		case tr.from == breaker.StateClosed && !closed.IsZero():
			reopened = tr.at
		}
	}
	if gap := reopened.Sub(closed); gap > 2*time.Second {
		t.Fatalf("the breaker opened again %v after it first closed: later than go-redis's dial probe period explains", gap)
	}
	return closed, reopened, true
}

// pollFor polls cond every 5ms until it holds, failing the test after
// limit.
func pollFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}

// startToxiproxy runs an in-process toxiproxy on a free loopback port in
// front of upstream; proxy.Listen is its address.
func startToxiproxy(t testing.TB, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(proxy.Stop)
	return proxy
}

// addLatency delays every reply from the server by latency.
func addLatency(t testing.TB, proxy *toxiproxy.Proxy, name string, latency time.Duration) {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d}}`, name, latency.Milliseconds())
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("toxiproxy: add %s: %v", name, err)
	}
}

func removeToxic(t *testing.T, proxy *toxiproxy.Proxy, name string) {
	t.Helper()
	if err := proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("toxiproxy: remove %s: %v", name, err)
	}
}
