package lockkit

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/telnames"
)

// Policy is how a domain's locks behave: how long a lease lives, how often it
// is renewed, how acquisition retries, and whether it issues fencing numbers.
type Policy struct {
	// TTL is how long the store keeps the lock without a renewal. It bounds how
	// long a crashed holder blocks others. Must be whole milliseconds, at least
	// 10ms, and within what the backend keeps (its driver.Capabilities: etcd
	// counts whole seconds from a 2s minimum).
	TTL time.Duration

	// Renew is how often a held lease is extended. 0 means TTL/3; a
	// negative value turns renewal off, so the lease is lost at its deadline.
	// Must be < TTL.
	Renew time.Duration

	// Retry is how acquisition waits for a held lock. The zero value makes a
	// single attempt.
	Retry Retry

	// Fencing makes every acquisition return a fencing number (Lease.Fence)
	// that is strictly increasing per key.
	Fencing bool

	// Replicas, when > 0, makes an acquisition wait (Redis WAIT) until that
	// many replicas hold the lock before the lease is granted. If fewer
	// acknowledge within ReplicaTimeout, the lock is released and the
	// acquisition fails with ErrUnavailable, rather than granting a lease
	// that a failover could forget.
	Replicas int
	// ReplicaTimeout bounds the wait for replicas (default 50ms).
	ReplicaTimeout time.Duration

	// Wait is how an acquisition waits for a held lock, as lockkit.yaml's
	// wait spells it: "poll" (or "", the default) retries per Retry;
	// "fifo" queues it in arrival order: in Redis, etcd or ZooKeeper, which
	// hand the lock over on release and wake the next waiter by push, or in
	// PostgreSQL's own lock queue (docs/semantics.md). Under "fifo",
	// Retry.MaxWait (required when Attempts > 1) and ctx bound the wait,
	// Attempts 1 (or 0 without a MaxWait) makes a single attempt, and the
	// backoff fields are unused. Redlock clients refuse "fifo" domains, and so does
	// Replicas > 0. Any other value is refused by Client.Domain.
	Wait string

	// MaxHold, when > 0, caps how long one lease may be held in total,
	// counted from the start of its acquisition: renewal never extends the
	// lease past it (the last renewal extends it only to the cap), and at
	// the cap, less the drift allowance, the lease is lost: fn's ctx is
	// cancelled with a cause that matches ErrLockLost and names the max
	// hold, and Do returns it. Must be above TTL, in whole milliseconds;
	// 0 means no cap.
	MaxHold time.Duration

	// Kind is what the domain's keys are: "lock" (or "", mutual
	// exclusion), "election" or "semaphore" (lockkit.yaml's kind). The
	// client refuses a kind its backend cannot serve.
	Kind string
	// Permits is how many holders a semaphore admits at once, >= 1; 0 for
	// any other kind. LOCKKIT_PERMITS_<NAME> overrides it.
	Permits int
}

// Retry is jittered exponential backoff for acquiring a held lock.
type Retry struct {
	// Attempts is the number of attempts, the first included; 1 means a
	// single attempt. 0 means a single attempt too, unless MaxWait is set:
	// then attempts are not counted, and MaxWait and ctx alone bound the
	// wait ("wait up to MaxWait").
	Attempts int
	// Initial is the first wait between attempts (default 50ms).
	Initial time.Duration
	// Max caps a single wait (default 1s).
	Max time.Duration
	// Multiplier grows the wait after each attempt; >= 1 (default 2).
	Multiplier float64
	// Jitter randomizes each wait by ±Jitter×wait; in (0, 1] (0 means the
	// default 0.5). Jitter cannot be turned off: without it, contenders that
	// collided once retry in lockstep.
	Jitter float64
	// MaxWait bounds the whole acquisition, waits and attempts together;
	// 0 means bounded only by Attempts and ctx. With Attempts 0 it is the
	// only bound besides ctx.
	MaxWait time.Duration
}

// wait is the policy's wait mode: "" is the default, poll.
func (p Policy) wait() (policy.Wait, error) {
	if p.Wait == "" {
		return policy.WaitPoll, nil
	}
	return policy.ParseWait(p.Wait)
}

// fifo reports whether the (validated) policy waits in a queue.
func (p Policy) fifo() bool {
	w, _ := p.wait()
	return w == policy.WaitFIFO
}

// withDefaults fills the zero fields that have a default.
func (p Policy) withDefaults() Policy {
	if p.Kind == policy.KindElection {
		p.Fencing = true // a term's number is its lease's fence
	}
	if p.Renew == 0 {
		p.Renew = policy.DefaultRenew(p.TTL)
	}
	if p.Replicas > 0 && p.ReplicaTimeout == 0 {
		p.ReplicaTimeout = policy.DefaultReplicaTimeout
	}
	r := &p.Retry
	if r.Attempts == 0 && r.MaxWait <= 0 {
		r.Attempts = 1
	}
	if r.Initial == 0 {
		r.Initial = policy.DefaultInitialInterval
	}
	if r.Max == 0 {
		r.Max = max(policy.DefaultMaxInterval, r.Initial)
	}
	if r.Multiplier == 0 {
		r.Multiplier = policy.DefaultMultiplier
	}
	if r.Jitter == 0 {
		r.Jitter = policy.DefaultJitter
	}
	return p
}

// validate reports every problem with a policy (after withDefaults), for a
// client whose commands time out after cmdTimeout.
func (p Policy) validate(cmdTimeout time.Duration) error {
	var errs []error
	if err := policy.CheckTTL(p.TTL); err != nil {
		errs = append(errs, err)
	} else if err := policy.CheckRenew(p.TTL, p.Renew, cmdTimeout); err != nil {
		errs = append(errs, err)
	}
	if p.Replicas < 0 {
		errs = append(errs, fmt.Errorf("replicas must be >= 0 (got %d)", p.Replicas))
	}
	if p.Replicas > 0 {
		if err := policy.CheckReplicaTimeout(p.TTL, p.ReplicaTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	r := p.Retry
	if r.Attempts < 0 {
		errs = append(errs, fmt.Errorf("retry max attempts must be >= 0 (got %d)", r.Attempts))
	}
	if r.Initial < 0 || r.Max < 0 || r.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("retry intervals must be >= 0 (got initial %v, max %v, max wait %v)", r.Initial, r.Max, r.MaxWait))
	}
	if r.Max < r.Initial {
		errs = append(errs, fmt.Errorf("retry max interval %v must be >= the initial interval %v", r.Max, r.Initial))
	}
	if err := policy.CheckMultiplier(r.Multiplier); err != nil {
		errs = append(errs, fmt.Errorf("retry %w", err))
	}
	if err := policy.CheckJitter(r.Jitter); err != nil {
		errs = append(errs, fmt.Errorf("retry %w", err))
	}
	if w, err := p.wait(); err != nil {
		errs = append(errs, err)
	} else if err := policy.CheckWait(w, r.Attempts, r.MaxWait, p.Replicas); err != nil {
		errs = append(errs, err)
	}
	for _, f := range policy.DurationFields() {
		v := time.Duration(reflect.ValueOf(p).FieldByName(f.GoName).Int())
		if err := f.Check(v, p.TTL); err != nil {
			errs = append(errs, err)
		}
	}
	if err := policy.CheckKind(p.Kind, p.Permits); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// retrySchedule is one acquisition's waits between attempts: jittered
// backoff, bounded by Attempts and by MaxWait from the start. Do and
// DoAll share it.
type retrySchedule struct {
	r     *Retry
	start time.Time
	bo    backoff.BackOff // made at the first wait: an uncontended acquire pays nothing
}

// next is the wait before the next attempt, or the outcome that ends the
// acquisition: OutcomeExhausted (no attempts left) or OutcomeTimeout
// (MaxWait spent).
func (s *retrySchedule) next() (time.Duration, telnames.Outcome, bool) {
	if s.bo == nil {
		s.bo = s.r.newBackOff()
	}
	wait := s.bo.NextBackOff()
	if wait == backoff.Stop {
		return 0, telnames.OutcomeExhausted, false
	}
	if mw := s.r.MaxWait; mw > 0 {
		left := mw - time.Since(s.start)
		if left <= 0 {
			return 0, telnames.OutcomeTimeout, false
		}
		wait = min(wait, left)
	}
	return wait, 0, true
}

// newBackOff returns a fresh backoff for one acquisition: backoff state must
// never be shared between acquisitions.
func (r Retry) newBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.Initial),
		backoff.WithMaxInterval(r.Max),
		backoff.WithMultiplier(r.Multiplier),
		backoff.WithRandomizationFactor(r.Jitter),
		// MaxWait is enforced by the acquire loop against its own start time,
		// so attempts are counted the same way whatever the clock.
		backoff.WithMaxElapsedTime(0),
	)
	if r.Attempts == 0 { // MaxWait bounds it (withDefaults)
		return b
	}
	return backoff.WithMaxRetries(b, uint64(r.Attempts-1))
}

// retries reports whether an acquisition may make more than one attempt:
// Attempts > 1, or 0 with a MaxWait (after withDefaults).
func (r *Retry) retries() bool { return r.Attempts != 1 }

// envOverride is one checked LOCKKIT_* override: a duration (one of
// internal/policy's EnvFields: the TTL and the like) or a count (permits).
type envOverride struct {
	d time.Duration
	n int
}

// isOverride reports whether the variable called name overrides a domain's
// policy: LOCKKIT_TTL_*, another of internal/policy's EnvFields, or
// LOCKKIT_PERMITS_*.
func isOverride(name string) bool {
	for _, f := range policy.EnvFields() {
		if strings.HasPrefix(name, f.EnvPrefix) {
			return true
		}
	}
	return strings.HasPrefix(name, policy.EnvPermitsPrefix)
}

// readOverrides parses every override variable (isOverride), keyed by the
// whole variable name. An invalid value is an error naming the variable,
// never a silent default.
func readOverrides(environ []string) (map[string]envOverride, error) {
	var (
		out  map[string]envOverride
		errs []error
	)
	// parse reads a value; notA says what it is not when it cannot be read.
	type parser func(val string) (o envOverride, notA string, err error)
	duration := func(check func(time.Duration) error) parser {
		return func(val string) (envOverride, string, error) {
			d, err := time.ParseDuration(strings.TrimSpace(val))
			if err != nil {
				return envOverride{}, "is not a duration; write a Go duration such as 8s or 500ms, at most 2562047h (about 292 years, a time.Duration's range)", nil
			}
			return envOverride{d: d}, "", check(d)
		}
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		var parse parser
		for _, f := range policy.EnvFields() {
			if strings.HasPrefix(name, f.EnvPrefix) {
				// The value's own rule; against the ttl, Client.Domain checks it.
				parse = duration(func(d time.Duration) error { return f.Check(d, 0) })
				break
			}
		}
		switch {
		case parse != nil:
		case strings.HasPrefix(name, policy.EnvPermitsPrefix):
			parse = func(val string) (envOverride, string, error) {
				n, err := strconv.Atoi(strings.TrimSpace(val))
				if err != nil {
					return envOverride{}, "is not a whole number; write one such as 3", nil
				}
				return envOverride{n: n}, "", policy.CheckPermits(n) // its kind is checked by Client.Domain
			}
		default:
			continue
		}
		o, notA, err := parse(val)
		if notA != "" {
			errs = append(errs, fmt.Errorf("lockkit: %s=%q %s", name, val, notA))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("lockkit: %s=%q: %w", name, val, err))
			continue
		}
		if out == nil {
			out = make(map[string]envOverride)
		}
		out[name] = o
	}
	return out, errors.Join(errs...)
}

func environ() []string { return os.Environ() }
