package drivertest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/lockkit"
)

// electionDomain binds an election domain, or skips the subtest when the
// backend cannot serve one (checking that the refusal names it).
func (s *suite) electionDomain(t *testing.T, c *lockkit.Client, p lockkit.Policy) *lockkit.Domain {
	t.Helper()
	p.Kind = "election"
	if !s.caps.Holders {
		d := c.Domain(lockkit.DomainSpec{Name: "drivertest", Prefix: s.prefix(t), Policy: p})
		if err := d.Err(); err == nil || !strings.Contains(err.Error(), "drivertest") {
			t.Fatalf("%s: an election domain on a backend without HolderReader: Err = %v, want a refusal naming the domain", s.h.Name, err)
		}
		t.Skipf("%s: no HolderReader; election domains are refused: %v", s.h.Name, c.Domain(lockkit.DomainSpec{Name: "drivertest", Prefix: s.prefix(t), Policy: p}).Err())
	}
	return s.domain(t, c, p)
}

func electionOf(d *lockkit.Domain) lockkit.Election {
	return d.Key(8).Literal("election").Election()
}

// electionOneLeader: candidates on several clients campaign at once, each
// leading a few terms. No two lead at once, every term has its own number,
// the numbers rise in the order the terms began, and Leader, read by the
// leader during its term, names that term.
func (s *suite) electionOneLeader(t *testing.T) {
	const candidates, termsEach = 3, 2
	var (
		mu    sync.Mutex
		terms []int64
		ov    overlap
		wg    sync.WaitGroup
	)
	p := lockkit.Policy{TTL: longTTL, Renew: fastRenew, Retry: retry}
	for i := range candidates {
		e := electionOf(s.electionDomain(t, s.client(t), p))
		wg.Go(func() {
			for range termsEach {
				err := e.Lead(ctxFor(t, patience), func(ctx context.Context, term *lockkit.Term) error {
					defer ov.enter()()
					mu.Lock()
					terms = append(terms, term.Number())
					mu.Unlock()
					ld, err := e.Leader(ctx)
					switch {
					case err != nil:
						return err
					case ld.Term != term.Number():
						t.Errorf("%s: candidate %d leads term %d, Leader says term %d", s.h.Name, i, term.Number(), ld.Term)
					case ld.Token != "" && ld.Token != term.Lease().Token():
						t.Errorf("%s: candidate %d leads with token %s, Leader says %s", s.h.Name, i, term.Lease().Token(), ld.Token)
					}
					time.Sleep(5 * time.Millisecond)
					return term.Err()
				})
				if err != nil {
					t.Errorf("%s: candidate %d: Lead: %v", s.h.Name, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := ov.max.Load(); m > 1 {
		t.Fatalf("%s: %d candidates led at once", s.h.Name, m)
	}
	if len(terms) != candidates*termsEach {
		t.Fatalf("%s: %d terms, want %d", s.h.Name, len(terms), candidates*termsEach)
	}
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Fatalf("%s: terms in the order they began: %v: not strictly increasing", s.h.Name, terms)
		}
	}
	// Nobody leads once every candidate has resigned.
	e := electionOf(s.electionDomain(t, s.client(t), p))
	if ld, err := e.Leader(ctxFor(t, patience)); err != nil || ld.Leads() {
		t.Errorf("%s: Leader after every term ended = %+v, %v; want nobody", s.h.Name, ld, err)
	}
}

// electionHandover: a leader that stops renewing (its term taken on the raw
// backend and never extended, as a killed process leaves it) is succeeded
// after its TTL, not before its deadline, by a waiting candidate with a
// higher term; an observer sees the dead leader's term, then the new one.
func (s *suite) electionHandover(t *testing.T) {
	ttl := s.h.TTL
	p := lockkit.Policy{TTL: ttl, Retry: retry}
	// A command timeout that a renewal fits in under the short TTL.
	cmd := lockkit.WithCommandTimeout(ttl / 5)
	e := electionOf(s.electionDomain(t, s.client(t, cmd), p))
	// The observer only reads: the longest command timeout the TTL allows
	// (a read on a fresh pool connection dials first).
	obs := electionOf(s.electionDomain(t, s.client(t, lockkit.WithCommandTimeout(ttl/2)), p))

	be := s.raw(t)
	sent := time.Now()
	dead, err := be.Acquire(ctxFor(t, patience), &driver.Request{Key: e.Key(), Token: rand.Text(), Holder: "o=dead", TTL: ttl, Fencing: true})
	if err != nil {
		t.Fatalf("%s: Acquire on the raw backend: %v", s.h.Name, err)
	}
	ld, err := obs.Leader(ctxFor(t, patience))
	if err != nil || ld.Term != dead {
		t.Fatalf("%s: Leader while the dead leader's key is held = %+v, %v; want term %d", s.h.Name, ld, err, dead)
	}
	octx, stop := context.WithCancel(context.Background())
	defer stop()
	changes, err := obs.Observe(octx)
	if err != nil {
		t.Fatalf("%s: Observe: %v", s.h.Name, err)
	}
	drift := ttl/100 + 2*time.Millisecond
	var next int64
	err = e.Lead(ctxFor(t, patience), func(ctx context.Context, term *lockkit.Term) error {
		if at := time.Since(sent); at < ttl-drift {
			t.Errorf("%s: a candidate led %v after the dead leader's grant, before its TTL %v less drift: two leaders", s.h.Name, at, ttl)
		}
		t.Logf("%s: leadership passed %v after the dead leader's grant (TTL %v)", s.h.Name, time.Since(sent).Round(time.Millisecond), ttl)
		next = term.Number()
		// Wait for the observer to see the new term.
		for {
			select {
			case ld, ok := <-changes:
				if !ok {
					return errors.New("Observe's channel closed early")
				}
				if ld.Term == next {
					return nil
				}
				if ld.Leads() && ld.Term != dead {
					t.Errorf("%s: Observe delivered term %d, neither the dead leader's %d nor the new %d", s.h.Name, ld.Term, dead, next)
				}
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	})
	if err != nil {
		t.Fatalf("%s: Lead after the leader died: %v", s.h.Name, err)
	}
	if next <= dead {
		t.Fatalf("%s: the next term %d is not above the dead leader's %d", s.h.Name, next, dead)
	}
	stop()
	for range changes { // closed once octx ends: the observer's goroutine is gone
	}
}
