// Command worker is a queue with at-least-once delivery: it hands the same
// job to two workers at once (a redelivery while the first is still working),
// and later once more (a lost ack). The job is processed once: the job's lock
// stops the concurrent duplicate, a processed record written under the lock
// stops the sequential one.
//
//	go run ./examples/worker
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
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("worker", run) }

const (
	jobID = "job-42"
	// workTime is how long processing the job takes (charging order 42).
	workTime = 150 * time.Millisecond

	prefix       = "lockkit-example:worker:"
	queueKey     = prefix + "queue"
	processedKey = prefix + "processed" // the idempotency record: a set of job ids
	chargesKey   = prefix + "charges"   // the side effect, counted
	stopMsg      = "stop"               // tells a worker to exit
)

// Outcomes of one delivery.
const (
	processed        = "processed"
	skippedHeld      = "skipped: being processed"
	skippedProcessed = "skipped: already processed"
)

// run starts two workers on the queue, delivers job-42 twice at once and then
// once more, and checks that it was processed once.
func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	q := env.NewRedis()
	if err := q.Del(ctx, queueKey, processedKey, chargesKey).Err(); err != nil {
		return err
	}
	tr := env.Tracer("github.com/lockkit/lockkit/examples/worker")
	fmt.Fprintf(w, "\nA queue delivers %s to two workers at once (redelivered while the first copy is being worked on),\nthen once more after the work is done (the ack was lost)\n", jobID)

	start := time.Now()
	var log exampleenv.Timeline
	results := make(chan delivery)
	wctx, stop := context.WithCancel(ctx)
	var wg, ready sync.WaitGroup
	defer wg.Wait() // on an early return, after stop
	defer stop()
	ready.Add(2)
	for i := range 2 {
		c, err := env.NewClient()
		if err != nil {
			return err
		}
		wk := &worker{name: fmt.Sprintf("worker-%d", i+1), locks: locks.New(c), rdb: env.NewRedis(), tr: tr, log: &log, start: start}
		wg.Go(func() { wk.loop(wctx, ready.Done, results) })
	}

	// Two copies at once: both workers are waiting on the queue, so each
	// takes one in the same instant. (Were one of them late, the other would
	// take both in turn, and the record would stop the second.)
	ready.Wait()
	log.Add(start, "queue     delivers %s twice (a redelivery: the broker thinks the first copy timed out)", jobID)
	if err := q.RPush(ctx, queueKey, jobID, jobID).Err(); err != nil {
		return err
	}
	var outcomes []string
	next := func() error {
		select {
		case r := <-results:
			if r.err != nil {
				return r.err
			}
			outcomes = append(outcomes, r.outcome)
			return nil
		case <-time.After(5 * time.Second):
			return fmt.Errorf("no worker reported a delivery of %s within 5s", jobID)
		}
	}
	for range 2 {
		if err := next(); err != nil {
			return err
		}
	}

	log.Add(start, "queue     delivers %s again (the ack of the worker that processed it was lost)", jobID)
	if err := q.RPush(ctx, queueKey, jobID).Err(); err != nil {
		return err
	}
	if err := next(); err != nil {
		return err
	}
	// One stop message per worker ends their loops.
	if err := q.RPush(ctx, queueKey, stopMsg, stopMsg).Err(); err != nil {
		return err
	}
	wg.Wait()
	log.Print(w)

	count := map[string]int{}
	for _, o := range outcomes {
		count[o]++
	}
	charges, err := q.Get(ctx, chargesKey).Int64()
	if err != nil && err != redis.Nil {
		return err
	}
	if count[processed] != 1 || charges != 1 || count[skippedHeld]+count[skippedProcessed] != 2 {
		return fmt.Errorf("%s: 3 deliveries gave %v and %d charges; want processed once", jobID, outcomes, charges)
	}
	// The third delivery comes after the work finished: only the record can stop it.
	if outcomes[2] != skippedProcessed {
		return fmt.Errorf("%s: the delivery after the work finished was %q, want %q", jobID, outcomes[2], skippedProcessed)
	}
	fmt.Fprintf(w, "   result: %s delivered 3 times, processed once (1 charge); %d skipped while being processed, %d as already processed.\n",
		jobID, count[skippedHeld], count[skippedProcessed])
	fmt.Fprintln(w, "   why: the job's lock stops concurrent duplicates: while one worker holds lock:{job:job-42}, TryDo tells")
	fmt.Fprintln(w, "   the other ErrNotAcquired. The processed record, written under the lock, stops sequential ones: once the")
	fmt.Fprintln(w, "   lock is free again, a redelivery finds the job in the record. Neither is enough alone.")
	return nil
}

// delivery is how a worker handled one delivery.
type delivery struct {
	outcome string
	err     error
}

type worker struct {
	name  string
	locks *locks.Locks
	rdb   *redis.Client
	tr    trace.Tracer
	log   *exampleenv.Timeline
	start time.Time
}

// loop takes jobs off the queue until a stop message or the end of ctx,
// sending each delivery's outcome to results. It calls ready as it starts
// waiting on the queue.
func (wk *worker) loop(ctx context.Context, ready func(), results chan<- delivery) {
	ready()
	for ctx.Err() == nil {
		res, err := wk.rdb.BRPop(ctx, time.Second, queueKey).Result()
		switch {
		case err == redis.Nil: // nothing this second
			continue
		case err != nil:
			time.Sleep(50 * time.Millisecond) // Redis trouble, or ctx ended
			continue
		}
		if res[1] == stopMsg {
			return
		}
		outcome, err := wk.handle(ctx, res[1])
		if err != nil {
			err = fmt.Errorf("%s handling %s: %w", wk.name, res[1], err)
		}
		select {
		case results <- delivery{outcome, err}:
		case <-ctx.Done():
		}
	}
}

// handle processes one delivery of job id, at most once across all
// deliveries.
func (wk *worker) handle(ctx context.Context, id string) (string, error) {
	ctx, span := wk.tr.Start(ctx, "handle job", trace.WithAttributes(
		attribute.String("worker", wk.name), attribute.String("job", id)))
	defer span.End()
	wk.log.Add(wk.start, "%s  got %s", wk.name, id)
	outcome := processed
	lerr := wk.locks.Job(id).TryDo(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		done, err := wk.rdb.SIsMember(ctx, processedKey, id).Result()
		if err != nil {
			return err
		}
		if done {
			outcome = skippedProcessed
			wk.log.Add(wk.start, "%s  acquired %s; %s (%s is in the processed record)", wk.name, lease.Key(), outcome, id)
			return nil
		}
		wk.log.Add(wk.start, "%s  acquired %s; not in the processed record: processing (charging order 42)", wk.name, lease.Key())
		if err := process(ctx, wk.rdb); err != nil {
			return err
		}
		// The record is written while the lock is still held, so no other
		// worker can be between its check and this write.
		if err := wk.rdb.SAdd(ctx, processedKey, id).Err(); err != nil {
			return err
		}
		wk.log.Add(wk.start, "%s  done; added %s to the processed record, releases the lock", wk.name, id)
		return nil
	})
	if errors.Is(lerr, lockkit.ErrNotAcquired) {
		wk.log.Add(wk.start, "%s  %s (%s is held by another worker: ErrNotAcquired)", wk.name, skippedHeld, wk.locks.Job(id).Key())
		return skippedHeld, nil
	}
	return outcome, lerr
}

// process is the job's side effect: charge the order (counted).
func process(ctx context.Context, rdb *redis.Client) error {
	select {
	case <-time.After(workTime):
	case <-ctx.Done():
		return context.Cause(ctx) // the lease was lost: stop
	}
	return rdb.Incr(ctx, chargesKey).Err()
}
