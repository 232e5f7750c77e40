package circuit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// errBackend is how go-redis reports a connection the server closed (see
// TestClassifyRealErrors): a backend failure.
var errBackend = io.EOF

// counter is an op that counts its calls and returns err.
type counter struct {
	calls atomic.Int64
	err   error
}

func (c *counter) op(context.Context) error {
	c.calls.Add(1)
	return c.err
}

func doN(t *testing.T, b *Breaker, ctx context.Context, n int, err error) {
	t.Helper()
	op := &counter{err: err}
	for i := range n {
		if got := b.Do(ctx, op.op); got != err {
			t.Fatalf("Do #%d returned %v, want %v unchanged", i+1, got, err)
		}
	}
}

func wantState(t *testing.T, b *Breaker, want breaker.State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("state = %v, want %v", got, want)
	}
}

// trip opens b with failures and returns when it did.
func trip(t *testing.T, b *Breaker) time.Time {
	t.Helper()
	doN(t, b, context.Background(), int(b.Settings().ConsecutiveFailures), errBackend)
	wantState(t, b, breaker.StateOpen)
	return time.Now()
}

// waitHalfOpen polls until b turns half-open.
func waitHalfOpen(t *testing.T, b *Breaker) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.State() != breaker.StateHalfOpen {
		if time.Now().After(deadline) {
			t.Fatalf("still %v 5s after tripping (OpenTimeout %v)", b.State(), b.Settings().OpenTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTripsAfterConsecutiveFailures(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour})
	doN(t, b, context.Background(), 2, errBackend)
	wantState(t, b, breaker.StateClosed)
	doN(t, b, context.Background(), 1, errBackend)
	wantState(t, b, breaker.StateOpen)
}

func TestDefaultThresholdIsFive(t *testing.T) {
	b := New("node", breaker.Settings{OpenTimeout: time.Hour})
	doN(t, b, context.Background(), 4, errBackend)
	wantState(t, b, breaker.StateClosed)
	doN(t, b, context.Background(), 1, errBackend)
	wantState(t, b, breaker.StateOpen)
}

// A nil reply is the backend answering: it breaks a run of failures.
func TestNilCountsAsSuccess(t *testing.T) {
	ctx := context.Background()
	b := New("node", breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour})
	doN(t, b, ctx, 2, errBackend)
	doN(t, b, ctx, 1, redis.Nil)
	doN(t, b, ctx, 2, errBackend)
	wantState(t, b, breaker.StateClosed)
	doN(t, b, ctx, 1, errBackend)
	wantState(t, b, breaker.StateOpen)
}

func TestContentionStormNeverTrips(t *testing.T) {
	ctx := context.Background()
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, FailureRatio: 0.01, MinRequests: 1, OpenTimeout: time.Hour})
	doN(t, b, ctx, 5000, redis.Nil)
	doN(t, b, ctx, 5000, redis.ErrNoScript)
	wantState(t, b, breaker.StateClosed)
}

// The caller's ctx ending counts neither way: a storm of it never trips the
// breaker, and it does not break a run of failures either.
func TestCallerCancellationStormNeverTrips(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Hour})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()

	doN(t, b, context.Background(), 2, errBackend)
	doN(t, b, cancelled, 5000, context.Canceled)
	doN(t, b, expired, 5000, context.DeadlineExceeded)
	wantState(t, b, breaker.StateClosed)
	doN(t, b, context.Background(), 1, errBackend)
	wantState(t, b, breaker.StateOpen)
}

// A per-command timeout with the caller still waiting is the backend's.
func TestPerCommandTimeoutTrips(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour})
	op := func(ctx context.Context) error {
		cmd, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		<-cmd.Done()
		return cmd.Err()
	}
	for range 2 {
		if err := b.Do(context.Background(), op); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v, want DeadlineExceeded", err)
		}
	}
	wantState(t, b, breaker.StateOpen)
}

func TestFailureRatio(t *testing.T) {
	ctx := context.Background()
	b := New("node", breaker.Settings{
		ConsecutiveFailures: math.MaxUint32, FailureRatio: 0.5, MinRequests: 10, OpenTimeout: time.Hour,
	})
	// S F S F …: half of them fail; the ratio is reached at the 10th.
	for i := range 9 {
		err := errBackend
		if i%2 == 0 {
			err = nil
		}
		doN(t, b, ctx, 1, err)
	}
	wantState(t, b, breaker.StateClosed)
	doN(t, b, ctx, 1, errBackend)
	wantState(t, b, breaker.StateOpen)
}

func TestFailureRatioBelowThreshold(t *testing.T) {
	ctx := context.Background()
	b := New("node", breaker.Settings{
		ConsecutiveFailures: math.MaxUint32, FailureRatio: 0.5, MinRequests: 10, OpenTimeout: time.Hour,
	})
	for range 100 { // one in three fails
		doN(t, b, ctx, 1, errBackend)
		doN(t, b, ctx, 2, nil)
	}
	wantState(t, b, breaker.StateClosed)
}

func TestIntervalClearsCounts(t *testing.T) {
	ctx := context.Background()
	b := New("node", breaker.Settings{ConsecutiveFailures: 3, Interval: 20 * time.Millisecond, OpenTimeout: time.Hour})
	doN(t, b, ctx, 2, errBackend)
	time.Sleep(60 * time.Millisecond)
	doN(t, b, ctx, 2, errBackend)
	wantState(t, b, breaker.StateClosed)
}

func TestOpenFailsFast(t *testing.T) {
	const open = time.Hour
	b := New("10.0.0.7:6379", breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: open})
	before := time.Now()
	tripped := trip(t, b)

	op := &counter{}
	for range 100 {
		err := b.Do(context.Background(), op.op)
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("Do while open = %v, want ErrOpen", err)
		}
		var oe *breaker.OpenError
		if !errors.As(err, &oe) {
			t.Fatalf("Do while open = %T, want *OpenError", err)
		}
		if oe.Name != "10.0.0.7:6379" || oe.State != breaker.StateOpen {
			t.Fatalf("OpenError = %+v, want name 10.0.0.7:6379, state open", oe)
		}
		if oe.Since.Before(before) || oe.Since.After(tripped) {
			t.Fatalf("Since = %v, want between %v and %v", oe.Since, before, tripped)
		}
		if oe.RetryAfter <= 0 || oe.RetryAfter > open {
			t.Fatalf("RetryAfter = %v, want in (0, %v]", oe.RetryAfter, open)
		}
		if msg := err.Error(); !strings.Contains(msg, `"10.0.0.7:6379" is open since`) || !strings.Contains(msg, "next probe in") {
			t.Fatalf("message %q does not say which circuit is open and until when", msg)
		}
	}
	if n := op.calls.Load(); n != 0 {
		t.Fatalf("op called %d times while open", n)
	}
}

func TestHalfOpenAfterOpenTimeoutThenCloses(t *testing.T) {
	const open = 30 * time.Millisecond
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: open})
	tripped := trip(t, b)
	waitHalfOpen(t, b)
	if d := time.Since(tripped); d < open {
		t.Fatalf("half-open after %v, before OpenTimeout %v", d, open)
	}
	op := &counter{}
	if err := b.Do(context.Background(), op.op); err != nil || op.calls.Load() != 1 {
		t.Fatalf("probe: err %v, calls %d; want it run once", err, op.calls.Load())
	}
	wantState(t, b, breaker.StateClosed)
}

func TestFailedProbeReopens(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 30 * time.Millisecond})
	first := trip(t, b)
	waitHalfOpen(t, b)
	doN(t, b, context.Background(), 1, errBackend)
	wantState(t, b, breaker.StateOpen)
	var oe *breaker.OpenError
	if err := b.Do(context.Background(), (&counter{}).op); !errors.As(err, &oe) || !oe.Since.After(first) {
		t.Fatalf("Do after a failed probe = %v, want an OpenError since the reopening", err)
	}
}

// While half-open, only HalfOpenProbes requests run; the rest are refused
// without running op.
func TestHalfOpenProbeLimit(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond, HalfOpenProbes: 1})
	trip(t, b)
	waitHalfOpen(t, b)

	started, release := make(chan struct{}), make(chan struct{})
	probeDone := make(chan error, 1)
	go func() {
		probeDone <- b.Do(context.Background(), func(context.Context) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started

	op := &counter{}
	err := b.Do(context.Background(), op.op)
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || oe.State != breaker.StateHalfOpen || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("second request while the probe runs: %v, want a half-open OpenError", err)
	}
	if oe.RetryAfter != 0 || !strings.Contains(err.Error(), "half-open") {
		t.Fatalf("half-open OpenError %+v / %q", oe, err)
	}
	if op.calls.Load() != 0 {
		t.Fatal("op ran beyond the probe limit")
	}
	close(release)
	if err := <-probeDone; err != nil {
		t.Fatal(err)
	}
	wantState(t, b, breaker.StateClosed)
}

func TestHalfOpenNeedsEveryProbeToSucceed(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond, HalfOpenProbes: 2})
	trip(t, b)
	waitHalfOpen(t, b)
	doN(t, b, context.Background(), 1, nil)
	wantState(t, b, breaker.StateHalfOpen)
	doN(t, b, context.Background(), 1, redis.Nil) // an answer is a success
	wantState(t, b, breaker.StateClosed)
}

// A probe that ends because its caller gave up frees its slot without
// deciding anything.
func TestCancelledProbeDecidesNothing(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond})
	trip(t, b)
	waitHalfOpen(t, b)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	doN(t, b, cancelled, 3, context.Canceled)
	wantState(t, b, breaker.StateHalfOpen)
	doN(t, b, context.Background(), 1, nil)
	wantState(t, b, breaker.StateClosed)
}

// A timeout during which this process was not scheduled (lag.go) says
// nothing about a closed circuit's node, but a half-open probe's must
// decide: ignored, it would free its slot, so that under a CPU starvation
// every request became a probe that waits for the command timeout at a node
// that is still down, and the circuit neither closed nor opened again
// (TestBreakerStopContinue admitted more requests than half-open periods).
func TestStarvedTimeout(t *testing.T) {
	starvedTimeout := func(context.Context) error {
		monitor.mu.Lock()
		monitor.ring[monitor.next] = lagTickRec{at: time.Now().UnixNano(), lag: 10 * lagFloor}
		monitor.next = (monitor.next + 1) % lagRing
		monitor.mu.Unlock()
		return os.ErrDeadlineExceeded
	}
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond})
	if err := b.Do(context.Background(), starvedTimeout); err != os.ErrDeadlineExceeded {
		t.Fatalf("Do = %v, want the op's error unchanged", err)
	}
	wantState(t, b, breaker.StateClosed) // closed: not counted
	trip(t, b)
	waitHalfOpen(t, b)
	_ = b.Do(context.Background(), starvedTimeout)
	wantState(t, b, breaker.StateOpen) // half-open: the probe failed
}

func TestOnStateChange(t *testing.T) {
	type change struct {
		name     string
		from, to breaker.State
	}
	var mu sync.Mutex
	var got []change
	b := New("node-a", breaker.Settings{
		ConsecutiveFailures: 1,
		OpenTimeout:         20 * time.Millisecond,
		OnStateChange: func(name string, from, to breaker.State) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, change{name, from, to})
		},
	})
	trip(t, b)
	waitHalfOpen(t, b)
	doN(t, b, context.Background(), 1, errBackend)
	waitHalfOpen(t, b)
	doN(t, b, context.Background(), 1, nil)

	want := []change{
		{"node-a", breaker.StateClosed, breaker.StateOpen},
		{"node-a", breaker.StateOpen, breaker.StateHalfOpen},
		{"node-a", breaker.StateHalfOpen, breaker.StateOpen},
		{"node-a", breaker.StateOpen, breaker.StateHalfOpen},
		{"node-a", breaker.StateHalfOpen, breaker.StateClosed},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("transition %d = %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}

// A panic in op is a bug, not a backend failure: re-raised, not counted.
func TestPanicIsReraisedAndNotCounted(t *testing.T) {
	b := New("node", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		_ = b.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	wantState(t, b, breaker.StateClosed)
}

func TestDoPassesCallerCtx(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	b := New("node", breaker.Settings{})
	err := b.Do(ctx, func(got context.Context) error {
		if got.Value(key{}) != "v" {
			t.Error("op did not get the caller's ctx")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSettingsDefaults(t *testing.T) {
	want := breaker.Settings{
		ConsecutiveFailures: 5, MinRequests: 20, Interval: 10 * time.Second,
		OpenTimeout: 2 * time.Second, HalfOpenProbes: 1,
	}
	for _, s := range []breaker.Settings{
		{},
		{FailureRatio: -1, Interval: -time.Second, OpenTimeout: -time.Second},
		{FailureRatio: math.NaN()},
	} {
		if got := New("n", s).Settings(); numbers(got) != numbers(want) {
			t.Errorf("Settings(%+v) = %v, want %v", s, numbers(got), numbers(want))
		}
	}
	if got := New("n", breaker.Settings{FailureRatio: 3}).Settings().FailureRatio; got != 1 {
		t.Errorf("FailureRatio 3 became %v, want 1", got)
	}
	if got := New("n", breaker.Settings{FailureRatio: 0.25}).Settings().FailureRatio; got != 0.25 {
		t.Errorf("FailureRatio 0.25 became %v", got)
	}
}

// numbers is s without its func field, to compare.
func numbers(s breaker.Settings) [6]any {
	return [6]any{s.ConsecutiveFailures, s.FailureRatio, s.MinRequests, s.Interval, s.OpenTimeout, s.HalfOpenProbes}
}

func TestNameAndStateString(t *testing.T) {
	if got := New("10.0.0.1:6379", breaker.Settings{}).Name(); got != "10.0.0.1:6379" {
		t.Errorf("Name() = %q", got)
	}
	for s, want := range map[breaker.State]string{breaker.StateClosed: "closed", breaker.StateHalfOpen: "half_open", breaker.StateOpen: "open", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", s, got, want)
		}
	}
}

// TestDoAgainstRealRedis runs real commands through a breaker: nil replies
// never trip it, a stopped server does, it then fails fast without touching
// the server, and it closes again once the server answers a probe.
func TestDoAgainstRealRedis(t *testing.T) {
	r := testserver.StartRedis(t)
	c := r.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 250 * time.Millisecond // a loaded machine answers GET well within it
		o.ContextTimeoutEnabled = false
	})
	b := New(r.Addr(), breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	var sent atomic.Int64
	get := func(ctx context.Context) error {
		sent.Add(1)
		return c.Get(ctx, "breaker-test:absent").Err()
	}

	for range 200 {
		if err := b.Do(ctx, get); err != redis.Nil {
			t.Fatalf("GET of an absent key through the breaker = %v, want redis.Nil", err)
		}
	}
	wantState(t, b, breaker.StateClosed)

	r.Pause(t)
	for range 3 {
		if err := b.Do(ctx, get); !IsBackendFailure(err, ctx) {
			t.Fatalf("GET against a stopped server = %v, want a backend failure", err)
		}
	}
	wantState(t, b, breaker.StateOpen)
	before := sent.Load()
	if err := b.Do(ctx, get); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Do while open = %v, want ErrOpen", err)
	}
	if sent.Load() != before {
		t.Fatal("a command was sent while the breaker was open")
	}

	r.Resume(t)
	waitHalfOpen(t, b)
	if err := b.Do(ctx, get); err != redis.Nil {
		t.Fatalf("probe after resume = %v, want redis.Nil", err)
	}
	wantState(t, b, breaker.StateClosed)
}

// TestSettingsDocDefaults: the field docs of breaker.Settings, which users
// read, state the defaults this package applies.
func TestSettingsDocDefaults(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "breaker", "breaker.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Default %d.", DefaultConsecutiveFailures),
		fmt.Sprintf("Default %d.", DefaultMinRequests),
		fmt.Sprintf("Default %v.", DefaultInterval),
		fmt.Sprintf("Default %v.", DefaultOpenTimeout),
		fmt.Sprintf("Default %d.", DefaultHalfOpenProbes),
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("breaker.Settings docs do not say %q", want)
		}
	}
}
