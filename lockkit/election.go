package lockkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
)

// Election is one election of a domain: its leader is the holder of a lock on
// the election's key, held for a term and renewed like any lease. A term's
// number is the lease's fence, so it is strictly increasing per election and
// can be checked at the resource (fence.Set, fence.Table). Generated helpers
// return it for a domain of kind election; the zero Election returns
// ErrNoClient from every method.
type Election struct{ l Lock }

// Election finishes the key and returns the election on it. A domain of
// another kind returns an Election whose methods say so.
func (b KeyBuilder) Election() Election {
	l := b.finish()
	if l.d != nil && l.err == nil && l.d.policy.Kind != policy.KindElection {
		l.err = fmt.Errorf("lockkit: domain %q is kind %s, not %s: use its Lock", l.d.name, cmp.Or(l.d.policy.Kind, policy.KindLock), policy.KindElection)
	}
	return Election{l: l}
}

// Key is the election's key (prefix included).
func (e Election) Key() string { return e.l.key }

// Term is one leader's term: the lease on the election's key.
type Term struct{ lease *Lease }

// Number is the term's number: the lease's fence, strictly increasing per
// election. Pass it to the resource the leader writes to, as a fence.
func (t *Term) Number() int64 {
	if t == nil {
		return 0
	}
	return t.lease.Fence()
}

// Lease is the lease that holds the term.
func (t *Term) Lease() *Lease {
	if t == nil {
		return nil
	}
	return t.lease
}

// Err is nil while the term's lease is valid, and matches ErrLockLost once
// leadership is lost (see Lease.Err): check it right before a side effect.
func (t *Term) Err() error {
	if t == nil {
		return errNoLease
	}
	return t.lease.Err()
}

// Leader is who leads an election, as the backend records it.
type Leader struct {
	// Term is the leader's term number; 0 when nobody leads.
	Term int64
	// Token is the leader's lease token; "" when the backend does not keep
	// it (PostgreSQL).
	Token string
	// Host, PID, Owner and TraceID describe the leader's process (its
	// client's WithOwner, and the trace of its campaign when traced); empty
	// when the backend keeps no description (PostgreSQL).
	Host    string
	PID     int
	Owner   string
	TraceID string
}

// Leads reports whether somebody leads.
func (l Leader) Leads() bool { return l.Term != 0 }

// checkElection refuses an election its client cannot serve.
func (e Election) check() error {
	d := e.l.d
	if d == nil {
		return ErrNoClient
	}
	if d.err != nil {
		return d.err
	}
	if e.l.err != nil {
		return e.l.err
	}
	if d.c == nil || d.c.be == nil {
		return ErrNoClient
	}
	if d.c.holders == nil {
		return fmt.Errorf("lockkit: election %s: %w", e.l.key, d.c.noHolders())
	}
	return nil
}

// noHolders is why the client's backend cannot serve an election.
func (c *Client) noHolders() error {
	return fmt.Errorf("the %s backend cannot read who holds a key (driver.HolderReader), which an election's Leader needs; use the Redis, PostgreSQL or etcd backend", c.kind)
}

// Lead campaigns for leadership and, once elected, runs fn for the term.
// It waits as the domain says (polling with backoff, or FIFO among the
// candidates where the domain waits fifo and the backend queues), and goes
// on campaigning, round after round, while another candidate leads or the
// backend is unavailable, until ctx ends or the client closes (then it
// returns an error matching ctx's error, or ErrClosed).
//
// fn's ctx is cancelled, with a cause matching ErrLockLost, the moment
// leadership is lost (see Lock.Do), and with one matching ErrClosed when the
// client closes. When fn returns, Lead resigns (releases the term's lease)
// and returns fn's error, joined with an error matching ErrLockLost when the
// term ended before fn returned. Lead does not campaign again: call it in a
// loop to stand again.
//
// When traced, the term's span (the hold span) links to the term span of
// the last leader the candidate saw while it waited (read once per lost
// round), with that term's number on the link: that is how a leader change
// shows in a trace viewer. A candidate elected at its first attempt saw no
// leader, and its term has no link.
func (e Election) Lead(ctx context.Context, fn func(ctx context.Context, term *Term) error) error {
	if err := e.check(); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("lockkit: Lead %s: %w", e.l.key, errNilFn)
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: Lead %s: %w", e.l.key, errNilCtx)
	}
	l := e.l
	c := l.d.c
	var prev driver.Holding // the last leader seen while campaigning, traced
	start := time.Now()
	for rounds := 1; ; rounds++ {
		lease, fctx, err := l.acquire(ctx, true, true)
		if err == nil {
			if prev.Fence != 0 && prev.Fence != lease.Fence() {
				_, who, _ := holder.Decode("t" + string(holder.Sep) + prev.Holder)
				lease.hold.LinkLeader(who.TraceID, who.SpanID, prev.Fence)
			}
			return lease.run(fctx, func(ctx context.Context, lease *Lease) error {
				return fn(ctx, &Term{lease: lease})
			})
		}
		if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrUnavailable) {
			return err
		}
		if ctx.Err() != nil {
			// ctx ended after the round's last attempt was checked against
			// it: ctx's end, not that round's contention, is why Lead stops.
			if errors.Is(err, ctx.Err()) {
				return err
			}
			return l.stoppedError(ctx, "Lead", rounds, "campaign round(s)", start)
		}
		if errors.Is(err, ErrNotAcquired) && l.d.tel.Tracing() {
			// Another candidate leads: remember its term span, for the
			// link from ours (one read per lost round, only when traced).
			rctx, cancel := context.WithTimeout(ctx, c.cmdTimeout)
			if h, held, err := c.holders.ReadHolder(rctx, l.key); err == nil && held && h.Holder != "" {
				prev = h
			}
			cancel()
		}
		if !c.pause(ctx, e.standby()) {
			if ctx.Err() == nil {
				return ErrClosed
			}
			return l.stoppedError(ctx, "Lead", rounds, "campaign round(s)", start)
		}
	}
}

// standby is how long a candidate waits between two rounds of its campaign:
// the domain's longest retry wait, at most a third of the TTL (a leader's
// key is free for about a TTL before a successor can take it), jittered.
func (e Election) standby() time.Duration {
	p := &e.l.d.policy
	d := min(max(p.Retry.Max, 10*time.Millisecond), max(p.TTL/3, time.Millisecond))
	return d/2 + rand.N(d)
}

// Leader reads who leads now from the backend: the holder of the
// election's key. Nobody leading is the zero Leader and a nil error.
func (e Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(); err != nil {
		return Leader{}, err
	}
	if ctx == nil {
		return Leader{}, fmt.Errorf("lockkit: Leader %s: %w", e.l.key, errNilCtx)
	}
	c := e.l.d.c
	rctx, cancel := context.WithTimeout(ctx, c.cmdTimeout)
	defer cancel()
	h, held, err := c.holders.ReadHolder(rctx, e.l.key)
	if err != nil {
		return Leader{}, fmt.Errorf("lockkit: Leader %s: %w", e.l.key, unavailable(err))
	}
	if !held {
		return Leader{}, nil
	}
	return leaderOf(h), nil
}

// leaderOf is the Leader a holder read describes.
func leaderOf(h driver.Holding) Leader {
	ld := Leader{Term: h.Fence, Token: h.Token}
	if h.Holder != "" {
		_, who, _ := holder.Decode("t" + string(holder.Sep) + h.Holder)
		ld.Host, ld.PID, ld.Owner, ld.TraceID = who.Host, who.PID, who.Owner, who.TraceID
	}
	return ld
}

// Observe delivers the election's leader each time it changes (a new term,
// or nobody leading), starting with the leader at the call. It reads the
// backend at the domain's renew interval (at most a second apart), skipping a
// read that fails; a change shorter than that may be missed, never reported
// out of order. The channel is closed when ctx ends or the client closes;
// the goroutine behind it ends then too. A reader that stops receiving
// must end ctx.
func (e Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, fmt.Errorf("lockkit: Observe %s: %w", e.l.key, errNilCtx)
	}
	c := e.l.d.c
	every := min(max(e.l.d.policy.Renew, 10*time.Millisecond), time.Second)
	ch := make(chan Leader)
	go func() {
		defer close(ch)
		var last Leader
		first := true
		for {
			ld, err := e.Leader(ctx)
			if err == nil && (first || ld.Term != last.Term || ld.Token != last.Token) {
				select {
				case ch <- ld:
					first, last = false, ld
				case <-ctx.Done():
					return
				case <-c.closeCtx.Done():
					return
				}
			}
			if !c.pause(ctx, every) {
				return
			}
		}
	}()
	return ch, nil
}
