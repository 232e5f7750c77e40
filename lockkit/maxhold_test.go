package lockkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testserver"
)

// max_hold on a real Redis: a Do with TTL 500ms and MaxHold 1.5s, whose fn
// ignores its ctx and keeps running past the cap. Renewal keeps the lease
// past its TTL but never past the cap: fn's ctx ends at the cap (not before
// it less the drift allowance), with a cause that matches ErrLockLost and
// names the max hold; the key's expiry on the server, read with PTTL while
// fn runs, never passes the cap; another client's waiting acquisition gets
// the key at the cap, while the first fn still runs; Do returns the loss.
func TestMaxHoldCapsTheLease(t *testing.T) {
	r := testserver.StartRedis(t)
	const (
		ttl     = 500 * time.Millisecond
		maxHold = 1500 * time.Millisecond
		runFor  = 2500 * time.Millisecond // fn's own length, past the cap
	)
	drift := policy.Drift(ttl)
	// A 500ms TTL needs a command timeout that leaves renewals room.
	l := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl, MaxHold: maxHold}), "capped")
	waiter := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)),
		Policy{TTL: ttl, Retry: Retry{Attempts: 1000, Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, MaxWait: 5 * time.Second}}), "capped")
	rdb := r.Client(t)

	var (
		wg          sync.WaitGroup
		start       time.Time // the lease's start, from its first deadline
		ctxEnded    time.Duration
		cause       error
		latestBound time.Duration // the latest server expiry seen, a lower bound, from start
		acquiredAt  time.Duration
		waiterErr   error
	)
	t0 := time.Now()
	err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		start = lease.Deadline().Add(-(ttl - drift))
		stop := make(chan struct{})
		wg.Add(3)
		go func() { // when fn's ctx ends, and why
			defer wg.Done()
			<-ctx.Done()
			ctxEnded, cause = time.Since(start), context.Cause(ctx)
		}()
		go func() { // the key's expiry on the server, while the lease is ours
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				sent := time.Now()
				pttl, err := rdb.PTTL(context.Background(), lease.Key()).Result()
				if err != nil || pttl <= 0 || !strings.Contains(rdb.Get(context.Background(), lease.Key()).Val(), lease.Token()) {
					continue // gone, or someone else's now
				}
				// The server read the TTL after sent: sent + pttl is a
				// lower bound of the key's expiry on this clock.
				latestBound = max(latestBound, sent.Add(pttl).Sub(start))
			}
		}()
		go func() { // the next acquirer, waiting from the start
			defer wg.Done()
			lease2, err := waiter.Acquire(context.Background())
			acquiredAt, waiterErr = time.Since(start), err
			if err == nil {
				_ = lease2.Release(context.Background())
			}
		}()
		time.Sleep(runFor - time.Since(t0)) // ignores ctx: the server must end the lock by itself
		close(stop)
		return nil
	})
	wg.Wait()

	t.Logf("fn's ctx ended at %v (cap %v, drift %v); latest server expiry seen ≥ %v; next acquirer at %v; Do = %v",
		ctxEnded.Round(time.Millisecond), maxHold, drift, latestBound.Round(time.Millisecond), acquiredAt.Round(time.Millisecond), err)
	// At the cap less the drift allowance (and the store's 1ms granularity).
	if ctxEnded < maxHold-drift-time.Millisecond || ctxEnded > maxHold+time.Second {
		t.Errorf("fn's ctx ended at %v, want at the max hold %v (not before it less drift %v)", ctxEnded, maxHold, drift)
	}
	if !errors.Is(cause, ErrLockLost) || !strings.Contains(cause.Error(), "max hold") {
		t.Errorf("fn's ctx cause = %v; want ErrLockLost naming the max hold", cause)
	}
	if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "max hold") {
		t.Errorf("Do = %v; want ErrLockLost naming the max hold", err)
	}
	// Renewal kept the key past its first TTL, and never past the cap (the
	// last extend's one-way delay allowed).
	if latestBound <= ttl || latestBound > maxHold+50*time.Millisecond {
		t.Errorf("the key's server-side expiry reached %v from the start; want above the TTL %v and never past the max hold %v", latestBound, ttl, maxHold)
	}
	if waiterErr != nil || acquiredAt < maxHold-drift || acquiredAt > maxHold+500*time.Millisecond {
		t.Errorf("the next acquirer got the key at %v (%v); want it at the max hold %v, while the capped fn still ran (until %v)", acquiredAt, waiterErr, maxHold, runFor)
	}
}

// A max hold not above the TTL is refused when the domain is bound, naming
// the rule; 0 is no cap.
func TestMaxHoldValidated(t *testing.T) {
	c := newClientOver(t, fakeUniversal(t))
	for _, tc := range []struct {
		maxHold time.Duration
		ok      bool
	}{
		{0, true}, {time.Second, false}, {999 * time.Millisecond, false}, {1001 * time.Millisecond, true},
		{-time.Second, false}, {1500*time.Millisecond + time.Microsecond, false},
	} {
		d := c.Domain(DomainSpec{Name: "capped", Policy: Policy{TTL: time.Second, MaxHold: tc.maxHold}})
		if (d.Err() == nil) != tc.ok {
			t.Errorf("MaxHold %v with TTL 1s: domain error %v, want ok=%v", tc.maxHold, d.Err(), tc.ok)
		}
		if !tc.ok && d.Err() != nil && !strings.Contains(d.Err().Error(), "max_hold") {
			t.Errorf("MaxHold %v: error %q does not name max_hold", tc.maxHold, d.Err())
		}
	}
}

// LOCKKIT_MAX_HOLD_<NAME> overrides a domain's max hold as LOCKKIT_TTL_<NAME>
// does its TTL: applied by Client.Domain, checked against the TTL there
// (naming the variable), checked as a duration by New, and refused by New
// when it names no registered domain.
func TestMaxHoldEnvOverride(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "capped_env"})
	t.Setenv("LOCKKIT_MAX_HOLD_CAPPED_ENV", "45s")
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Domain(DomainSpec{Name: "capped_env", Policy: Policy{TTL: 10 * time.Second}}).Policy(); p.MaxHold != 45*time.Second {
		t.Errorf("MaxHold = %v, want 45s from LOCKKIT_MAX_HOLD_CAPPED_ENV", p.MaxHold)
	}
	d := c.Domain(DomainSpec{Name: "capped_env", Policy: Policy{TTL: time.Minute}})
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "(with the max hold 45s from LOCKKIT_MAX_HOLD_CAPPED_ENV)") {
		t.Errorf("a max hold below the TTL from the environment: %v", d.Err())
	}
	_ = c.Close(context.Background())

	t.Setenv("LOCKKIT_MAX_HOLD_CAPPED_ENV", "soon")
	if _, err := New(goredis.New(fakeUniversal(t))); err == nil || !strings.Contains(err.Error(), "LOCKKIT_MAX_HOLD_CAPPED_ENV") {
		t.Errorf("a max hold that is not a duration: New = %v", err)
	}
	t.Setenv("LOCKKIT_MAX_HOLD_CAPPED_ENV", "0")
	t.Setenv("LOCKKIT_MAX_HOLD_CAPED_ENV", "1m")
	if _, err := New(goredis.New(fakeUniversal(t))); err == nil || !strings.Contains(err.Error(), "LOCKKIT_MAX_HOLD_CAPED_ENV names no lock domain") {
		t.Errorf("a mistyped max hold variable: New = %v", err)
	}
}
