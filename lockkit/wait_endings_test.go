package lockkit

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestWaitEndingsMatchOneKind: every way a wait for a held lock can end,
// for a polling and a FIFO domain, gives an error that matches exactly one
// of the kinds docs/semantics.md documents ("Contention vs failure", and
// ErrClosed), and the acquire span, the hold span and
// lockkit.acquire.duration record the outcome docs/telemetry.md and
// telnames document for that kind; failures (and only they) set error.type
// and an Error status. A FIFO domain counts no attempts (Policy.Wait: only
// MaxWait and ctx bound its wait), so it has no "max attempts" ending.
func TestWaitEndingsMatchOneKind(t *testing.T) {
	kinds := []struct {
		name string
		err  error // nil: the lease was granted
	}{
		{"nil", nil}, {"ErrNotAcquired", ErrNotAcquired}, {"ErrUnavailable", ErrUnavailable},
		{"ErrClosed", ErrClosed}, {"context.Canceled", context.Canceled}, {"context.DeadlineExceeded", context.DeadlineExceeded},
	}
	// One ending of a wait. trigger runs once the wait is under way (the
	// waiter queued, for FIFO); the wait's ctx is cancel's.
	type rig struct {
		r      *testserver.Redis
		g      *telRig
		holder *Lease
		cancel context.CancelFunc
	}
	type ending struct {
		name     string
		retry    Retry         // the waiter's polling retry (FIFO: MaxWait only)
		ctxLimit time.Duration // > 0: the wait's ctx has this deadline
		ownRedis bool          // the trigger stops the server
		opts     []Option      // the waiting client's
		trigger  func(t *testing.T, x rig)
		pollOnly bool
		want     string // the kind's name
		outcome  string
	}
	long := 10 * time.Second
	noTrip := []Option{WithBreaker(breaker.Settings{ConsecutiveFailures: math.MaxUint32})}
	endings := []ending{
		{name: "granted", retry: Retry{MaxWait: long},
			trigger: func(t *testing.T, x rig) {
				if err := x.holder.Release(t.Context()); err != nil {
					t.Errorf("holder's Release: %v", err)
				}
			}, want: "nil", outcome: "acquired"},
		{name: "max attempts", retry: Retry{Attempts: 3}, pollOnly: true, want: "ErrNotAcquired", outcome: "exhausted"},
		{name: "max wait", retry: Retry{MaxWait: 300 * time.Millisecond}, want: "ErrNotAcquired", outcome: "timeout"},
		{name: "ctx cancelled", retry: Retry{MaxWait: long},
			trigger: func(_ *testing.T, x rig) { x.cancel() }, want: "context.Canceled", outcome: "canceled"},
		{name: "ctx deadline", retry: Retry{MaxWait: long}, ctxLimit: 300 * time.Millisecond,
			want: "context.DeadlineExceeded", outcome: "timeout"},
		// The breaker never trips here: every failed attempt is retried
		// until max_wait, and the last one's failure ends the wait.
		{name: "backend unavailable", retry: Retry{MaxWait: 2 * time.Second}, ownRedis: true, opts: noTrip,
			trigger: func(t *testing.T, x rig) { x.r.Stop(t) }, want: "ErrUnavailable", outcome: "unavailable"},
		// The default breaker trips after 5 failures in a row; the next
		// attempt is refused at once.
		{name: "breaker open", retry: Retry{MaxWait: long}, ownRedis: true,
			trigger: func(t *testing.T, x rig) { x.r.Stop(t) }, want: "ErrUnavailable", outcome: "breaker_open"},
		{name: "Close", retry: Retry{MaxWait: long},
			trigger: func(t *testing.T, x rig) {
				if err := x.g.c.Close(t.Context()); err != nil {
					t.Errorf("Close = %v, want nil (the waiting client holds nothing)", err)
				}
			}, want: "ErrClosed", outcome: "closed"},
	}
	failure := map[string]bool{"acquired": false, "released": false, "canceled": false}
	shared := testserver.StartRedis(t)
	for _, wait := range []string{"poll", "fifo"} {
		for _, e := range endings {
			if e.pollOnly && wait == "fifo" {
				continue
			}
			t.Run(wait+"/"+e.name, func(t *testing.T) {
				r := shared
				if e.ownRedis {
					t.Parallel() // its own server, and seconds spent waiting
					r = testserver.StartRedis(t)
				}
				p := Policy{TTL: long, Retry: e.retry}
				if wait == "fifo" {
					p.Wait = "fifo"
				} else {
					p.Retry.Initial, p.Retry.Max = 5*time.Millisecond, 20*time.Millisecond
				}
				holderC := newClient(t, r)
				l := lockOn(testDomain(t, holderC, p), "k")
				holder, err := l.TryAcquire(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				g := newTelRig(t, r, e.opts...)
				ctx, cancel := context.WithCancel(context.Background())
				if e.ctxLimit > 0 {
					ctx, cancel = context.WithTimeout(context.Background(), e.ctxLimit)
				}
				defer cancel()
				done := make(chan error, 1)
				go func() {
					done <- lockOn(testDomain(t, g.c, p), "k").Do(ctx, func(context.Context, *Lease) error {
						if e.want != "nil" {
							return errors.New("fn ran")
						}
						return nil
					})
				}()
				if e.trigger != nil {
					if wait == "fifo" {
						waitQueueLen(t, r.Client(t), l, 1)
					} else {
						time.Sleep(100 * time.Millisecond) // under way; earlier ends the same way
					}
					e.trigger(t, rig{r: r, g: g, holder: holder, cancel: cancel})
				}
				var got error
				select {
				case got = <-done:
				case <-time.After(15 * time.Second):
					t.Fatal("the wait did not end")
				}
				noNilWrap(t, got)
				var matched []string
				for _, k := range kinds {
					if (k.err == nil && got == nil) || (k.err != nil && errors.Is(got, k.err)) {
						matched = append(matched, k.name)
					}
				}
				if len(matched) != 1 || matched[0] != e.want {
					t.Errorf("Do = %v: matches %v, want exactly [%s]", got, matched, e.want)
				}
				if e.outcome == "breaker_open" && !errors.Is(got, breaker.ErrOpen) {
					t.Errorf("Do = %v, want it to match breaker.ErrOpen too", got)
				}

				acq, hold := g.one(t, "lockkit.acquire test"), g.one(t, "lockkit.hold test")
				holdOutcome := e.outcome
				if e.outcome == "acquired" {
					holdOutcome = "released"
				}
				for _, s := range []struct {
					name, outcome string
					span          tracetest.SpanStub
				}{{"acquire", e.outcome, acq}, {"hold", holdOutcome, hold}} {
					o, _ := attrOf(s.span.Attributes, telnames.AttrOutcome)
					if o.AsString() != s.outcome {
						t.Errorf("%s span outcome %q, want %q", s.name, o.AsString(), s.outcome)
					}
					et, hasET := attrOf(s.span.Attributes, telnames.AttrErrorType)
					isFailure, listed := failure[s.outcome]
					if !listed {
						isFailure = true
					}
					switch {
					case isFailure && (et.AsString() != s.outcome || s.span.Status.Code != codes.Error):
						t.Errorf("%s span: error.type %q, status %v; want %q, Error", s.name, et.AsString(), s.span.Status.Code, s.outcome)
					case !isFailure && (hasET || s.span.Status.Code == codes.Error):
						t.Errorf("%s span: error.type %q, status %v; want neither (%s is no failure)", s.name, et.AsString(), s.span.Status.Code, s.outcome)
					}
				}
				wantPoints(t, g.metrics(t), telnames.MetricAcquireDuration, map[string]telPoint{byOutcome(e.outcome): {count: 1}})
				if e.ownRedis {
					// The server is gone: close both clients now, with a
					// short ctx, rather than in the cleanups' 5 s each.
					for _, c := range []*Client{holderC, g.c} {
						cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
						_ = c.Close(cctx)
						ccancel()
					}
				}
			})
		}
	}
}
