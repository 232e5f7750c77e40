// Command digest runs an hourly job on three replicas of a service, each of
// which fires it at the top of the hour: a lock keyed by the job and the hour
// lets exactly one of them run it. Then the same for one user's digest email,
// pulled by two workers at once.
//
//	go run ./examples/digest
//
// With no REDIS_URL it runs on an embedded in-process Redis; with
// OTEL_EXPORTER_OTLP_ENDPOINT set it sends its traces to Jaeger, otherwise it
// prints a summary of the lock spans.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("digest", run) }

const (
	// jobTime is how long the hourly digest job runs: long enough that
	// every replica fires while the winner still holds the lock.
	jobTime = 200 * time.Millisecond
	// sendTime is how long sending one user's digest takes.
	sendTime = 100 * time.Millisecond
	// userID is the user whose digest two workers pull at once.
	userID = 9182
)

// run fires the hourly job on three replicas, then one user's digest on two
// workers, and checks that each ran exactly once.
func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	st := &store{rdb: env.NewRedis()}
	hour := time.Now().Unix() / 3600
	if err := st.reset(ctx, hour); err != nil {
		return err
	}
	tr := env.Tracer("github.com/lockkit/lockkit/examples/digest")
	if err := hourly(ctx, w, env, st, tr, hour); err != nil {
		return err
	}
	return userDigest(ctx, w, env, st, tr)
}

func hourly(ctx context.Context, w io.Writer, env *exampleenv.Env, st *store, tr trace.Tracer, hour int64) error {
	fmt.Fprintf(w, "\n1. Three replicas fire the hourly digest job at the same instant, for hour %d (%s)\n",
		hour, time.Unix(hour*3600, 0).UTC().Format("2006-01-02 15:04 MST"))
	replicas := make([]*replica, 3)
	for i := range replicas {
		c, err := env.NewClient()
		if err != nil {
			return err
		}
		replicas[i] = &replica{name: fmt.Sprintf("replica-%d", i+1), locks: locks.New(c), st: st, tr: tr}
	}

	start := time.Now()
	var log exampleenv.Timeline
	outcomes := make([]string, len(replicas))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, r := range replicas {
		wg.Go(func() {
			<-gate
			outcomes[i] = r.fire(ctx, hour, start, &log)
		})
	}
	close(gate) // the top of the hour, on every replica at once
	wg.Wait()

	// One of the replicas that skipped restarts, and its scheduler fires the
	// hour again, after the run has finished and the lock is free.
	restarted := replicas[0]
	for i, o := range outcomes {
		if o == "held" {
			restarted = replicas[i]
			break
		}
	}
	log.Add(start, "%s  restarts; its scheduler fires hour %d again", restarted.name, hour)
	late := restarted.fire(ctx, hour, start, &log)
	log.Print(w)

	runs, err := st.runs(ctx, hour)
	if err != nil {
		return err
	}
	ran, skipped := 0, 0
	for _, o := range append(outcomes, late) {
		switch o {
		case "ran":
			ran++
		case "held", "done":
			skipped++
		default:
			return errors.New(o)
		}
	}
	if runs != 1 || ran != 1 || skipped != 3 || late != "done" {
		return fmt.Errorf("hour %d: the job ran %d time(s) (%d by count), %d replicas skipped, the late firing %q; want exactly one run",
			hour, runs, ran, skipped, late)
	}
	fmt.Fprintf(w, "   result: the digest job ran exactly once for hour %d; 2 replicas skipped it while it ran, 1 after.\n", hour)
	fmt.Fprintln(w, "   why: every replica builds the same key, lock:{cron:digest:<hour>}, so TryDo lets one in and tells the")
	fmt.Fprintln(w, "   others ErrNotAcquired, an outcome, not a failure. The lock only stops runs from overlapping; the done")
	fmt.Fprintln(w, "   record, written under it, is what stops a later firing of the same hour.")
	return nil
}

type replica struct {
	name  string
	locks *locks.Locks
	st    *store
	tr    trace.Tracer
}

// fire is the replica's scheduler firing the digest job for hour. It returns
// "ran", "held" (another replica holds the lock), "done" (the hour was
// already run), or an error message.
func (r *replica) fire(ctx context.Context, hour int64, start time.Time, log *exampleenv.Timeline) string {
	ctx, span := r.tr.Start(ctx, "cron digest", trace.WithAttributes(
		attribute.String("replica", r.name), attribute.Int64("hour", hour)))
	defer span.End()
	outcome := "ran"
	err := r.locks.Cron("digest", hour).TryDo(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		if by, done, err := r.st.done(ctx, hour); err != nil {
			return err
		} else if done {
			outcome = "done"
			log.Add(start, "%s  acquired %s; skipped: hour %d already done by %s", r.name, lease.Key(), hour, by)
			return nil
		}
		log.Add(start, "%s  acquired %s; runs the digest job for hour %d", r.name, lease.Key(), hour)
		if err := r.st.runJob(ctx, hour, r.name); err != nil {
			return err
		}
		log.Add(start, "%s  finished the job; recorded hour %d as done", r.name, hour)
		return nil
	})
	switch {
	case errors.Is(err, lockkit.ErrNotAcquired):
		log.Add(start, "%s  skipped: another replica holds cron digest for hour %d", r.name, hour)
		return "held"
	case err != nil:
		return fmt.Sprintf("%s: %v", r.name, err)
	}
	return outcome
}

// userDigest: two workers pull "send user 9182's digest" at the same
// instant; the user gets one email.
func userDigest(ctx context.Context, w io.Writer, env *exampleenv.Env, st *store, tr trace.Tracer) error {
	fmt.Fprintf(w, "\n2. Two workers pull \"send the digest to user %d\" at the same instant\n", userID)
	workers := make([]*locks.Locks, 2)
	for i := range workers {
		c, err := env.NewClient()
		if err != nil {
			return err
		}
		workers[i] = locks.New(c)
	}
	start := time.Now()
	var log exampleenv.Timeline
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, l := range workers {
		name := fmt.Sprintf("worker-%d", i+1)
		wg.Go(func() {
			<-gate
			ctx, span := tr.Start(ctx, "send user digest", trace.WithAttributes(
				attribute.String("worker", name), attribute.Int64("user", userID)))
			defer span.End()
			err := l.UserDigest(userID).TryDo(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
				log.Add(start, "%s   acquired %s; sends the digest email", name, lease.Key())
				if err := st.sendDigest(ctx, userID); err != nil {
					return err
				}
				log.Add(start, "%s   sent it", name)
				return nil
			})
			if errors.Is(err, lockkit.ErrNotAcquired) {
				log.Add(start, "%s   skipped: another worker is sending user %d's digest", name, userID)
				return
			}
			errs[i] = err
		})
	}
	close(gate)
	wg.Wait()
	log.Print(w)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	sent, err := st.emails(ctx, userID)
	if err != nil {
		return err
	}
	if sent != 1 {
		return fmt.Errorf("user %d got %d digest emails, want 1", userID, sent)
	}
	fmt.Fprintf(w, "   result: user %d got exactly 1 digest email.\n", userID)
	fmt.Fprintln(w, "   why: locks.UserDigest has a single attempt (retry: none in lockkit.yaml): a worker that finds the lock")
	fmt.Fprintln(w, "   held skips the job, since the holder is already sending it.")
	return nil
}

// store is what the jobs write: run counts, done records, emails sent.
type store struct{ rdb *redis.Client }

const prefix = "lockkit-example:digest:"

func runsKey(hour int64) string { return prefix + "runs:" + strconv.FormatInt(hour, 10) }
func doneKey(hour int64) string { return prefix + "done:" + strconv.FormatInt(hour, 10) }
func emailsKey(user int64) string {
	return prefix + "emails:" + strconv.FormatInt(user, 10)
}

// reset clears the demo's records, so that the example can run again on the
// same server within the hour.
func (s *store) reset(ctx context.Context, hour int64) error {
	return s.rdb.Del(ctx, runsKey(hour), doneKey(hour), emailsKey(userID)).Err()
}

func (s *store) done(ctx context.Context, hour int64) (by string, done bool, err error) {
	by, err = s.rdb.Get(ctx, doneKey(hour)).Result()
	if err == redis.Nil {
		return "", false, nil
	}
	return by, err == nil, err
}

// runJob is the hourly job: it counts its run, works, and records the hour
// as done (kept a day, well past any late firing).
func (s *store) runJob(ctx context.Context, hour int64, by string) error {
	if err := s.rdb.Incr(ctx, runsKey(hour)).Err(); err != nil {
		return err
	}
	select {
	case <-time.After(jobTime):
	case <-ctx.Done(): // the lease was lost: stop
		return context.Cause(ctx)
	}
	return s.rdb.Set(ctx, doneKey(hour), by, 24*time.Hour).Err()
}

func (s *store) runs(ctx context.Context, hour int64) (int64, error) {
	n, err := s.rdb.Get(ctx, runsKey(hour)).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

func (s *store) sendDigest(ctx context.Context, user int64) error {
	select {
	case <-time.After(sendTime):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return s.rdb.Incr(ctx, emailsKey(user)).Err()
}

func (s *store) emails(ctx context.Context, user int64) (int64, error) {
	n, err := s.rdb.Get(ctx, emailsKey(user)).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}
