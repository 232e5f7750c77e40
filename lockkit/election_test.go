package lockkit

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Kinds do not mix: a lock domain has no Election and an election domain no
// Lock; an election forces fencing; a nil fn or ctx is a clear error; no I/O.
func TestElectionMisuse(t *testing.T) {
	c := newClientOver(t, fakeUniversal(t))
	lockD := testDomain(t, c, Policy{TTL: time.Second})
	elD := c.Domain(DomainSpec{Name: "elect", Prefix: "lock:" + t.Name() + ":", Policy: Policy{TTL: time.Second, Kind: "election"}})
	if err := elD.Err(); err != nil {
		t.Fatal(err)
	}
	if !elD.policy.Fencing {
		t.Error("an election domain without fencing: its term is its fence")
	}
	ctx := context.Background()
	if err := lockD.Key(1).Literal("x").Election().Lead(ctx, func(context.Context, *Term) error { return nil }); err == nil || !strings.Contains(err.Error(), "not election") {
		t.Errorf("Lead on a lock domain = %v, want a refusal naming the kind", err)
	}
	if err := elD.Key(1).Literal("x").Lock().TryDo(ctx, func(context.Context, *Lease) error { return nil }); err == nil || !strings.Contains(err.Error(), "use its Election") {
		t.Errorf("TryDo on an election domain = %v, want a refusal", err)
	}
	e := elD.Key(1).Literal("x").Election()
	if err := e.Lead(ctx, nil); !errors.Is(err, errNilFn) {
		t.Errorf("Lead(nil fn) = %v", err)
	}
	//lockkit-vet:ignore a nil ctx is the misuse under test
	if _, err := e.Leader(nil); !errors.Is(err, errNilCtx) {
		t.Errorf("Leader(nil ctx) = %v", err)
	}
	if err := (Election{}).Lead(ctx, func(context.Context, *Term) error { return nil }); err != ErrNoClient {
		t.Errorf("zero Election: %v, want ErrNoClient", err)
	}
}

// A term ends when its key is stolen: fn's ctx is cancelled with a cause
// matching ErrLockLost, Lead returns it, and Observe's channel closes with
// its ctx.
func TestElectionLostTerm(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := c.Domain(DomainSpec{Name: "elect", Prefix: "lock:" + t.Name() + ":", Policy: Policy{TTL: 2 * time.Second, Renew: 50 * time.Millisecond, Kind: "election"}})
	e := d.Key(1).Literal("x").Election()
	rdb := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.Lead(ctx, func(ctx context.Context, term *Term) error {
		ld, err := e.Leader(ctx)
		if err != nil || ld.Term != term.Number() || ld.Token != term.Lease().Token() || ld.PID == 0 {
			t.Errorf("Leader = %+v, %v; want term %d, token %s and this process", ld, err, term.Number(), term.Lease().Token())
		}
		rdb.Del(ctx, e.Key())
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), ErrLockLost) {
			t.Errorf("fn's ctx cause = %v, want ErrLockLost", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Lead after the key was stolen = %v, want ErrLockLost", err)
	}
	octx, ostop := context.WithCancel(ctx)
	ch, err := e.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-ch; ld.Leads() {
		t.Errorf("Observe's first value = %+v, want nobody leading", ld)
	}
	ostop()
	for range ch {
	}
}

// endHook cancels a ctx when a lockkit.hold span ends while armed: the
// moment an acquisition's last attempt was checked against ctx and found
// the key held, before Lead looked at ctx. It stands for a ctx whose
// deadline passes in that window.
type endHook struct {
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (h *endHook) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (h *endHook) OnEnd(s sdktrace.ReadOnlySpan) {
	if strings.HasPrefix(s.Name(), telnames.SpanHold) && h.armed.Load() {
		h.cancel()
	}
}
func (h *endHook) Shutdown(context.Context) error   { return nil }
func (h *endHook) ForceFlush(context.Context) error { return nil }

// holdTerm makes e's candidate the leader, in a Lead that holds the term
// until the returned func is called (which checks Lead returned nil).
func holdTerm(t *testing.T, ctx context.Context, e Election) (resign func()) {
	t.Helper()
	elected, hold := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Lead(ctx, func(context.Context, *Term) error { close(elected); <-hold; return nil })
	}()
	<-elected
	return func() {
		close(hold)
		if err := <-done; err != nil {
			t.Errorf("the leader's Lead = %v", err)
		}
	}
}

// Lead returns an error matching ctx's when ctx ends while it campaigns,
// also when ctx ends right after a round's last attempt found the term
// held, before Lead looked at ctx: never a bare ErrNotAcquired, which a
// caller reads as "campaign again".
func TestElectionLeadCtxEndsAfterRound(t *testing.T) {
	r := testserver.StartRedis(t)
	p := Policy{TTL: 2 * time.Second, Kind: "election", Retry: Retry{Attempts: 1}}
	bg, cancelAll := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelAll()
	defer holdTerm(t, bg, testDomain(t, newClient(t, r), p).Key(1).Literal("x").Election())()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	hook := &endHook{cancel: cancel}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hook))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	e := testDomain(t, newClient(t, r, WithTracerProvider(tp)), p).Key(1).Literal("x").Election()
	hook.armed.Store(true)
	err := e.Lead(ctx, func(context.Context, *Term) error { return errors.New("led") })
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotAcquired) {
		t.Errorf("Lead with ctx cancelled while it campaigned = %v; want an error matching context.Canceled (Lead's doc), not ErrNotAcquired", err)
	}
}

// A campaign that ctx ends while it stands by between rounds says how many
// rounds it made and for how long: never "after 0 attempt(s) in 0s", which
// read as if Lead had not tried at all.
func TestElectionLeadCtxEndsSaysRounds(t *testing.T) {
	r := testserver.StartRedis(t)
	p := Policy{TTL: 2 * time.Second, Kind: "election", Retry: Retry{Attempts: 1}}
	bg, cancelAll := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelAll()
	defer holdTerm(t, bg, testDomain(t, newClient(t, r), p).Key(1).Literal("x").Election())()
	// Standby between rounds is up to a third of the TTL: ctx ends during
	// one, after at least one round found the term held.
	ctx, cancel := context.WithTimeout(bg, 900*time.Millisecond)
	defer cancel()
	e := testDomain(t, newClient(t, r), p).Key(1).Literal("x").Election()
	err := e.Lead(ctx, func(context.Context, *Term) error { return errors.New("led") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lead = %v, want an error matching context.DeadlineExceeded", err)
	}
	msg := err.Error()
	if strings.Contains(msg, " 0 attempt(s)") || strings.Contains(msg, " 0 campaign round(s)") || strings.Contains(msg, " in 0s") {
		t.Errorf("Lead's error = %q: it counts no round, or no time, though it campaigned until ctx ended", msg)
	}
	if !strings.Contains(msg, "Lead") {
		t.Errorf("Lead's error = %q: it does not say Lead stopped", msg)
	}
}
