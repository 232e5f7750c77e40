package rediswire

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Combiner is the Queue of goredis.New's lock commands on a *redis.Client:
// a command goes out at once, on the caller's goroutine, while fewer than
// its limit of sends are in flight; beyond that it waits, with the others
// that come meanwhile, for the first of those sends to return, and they go
// out together as one pipeline (go-redis's own, Pipeline and Exec). A lone
// caller, or a few, pay what a plain client costs; many goroutines at once
// pay one round trip, and one write and one read on each side, for a batch
// instead of one each: on a small machine, where those system calls and
// wake-ups are most of a lock's CPU, that is what bounds throughput
// (docs/benchmarks.md, "Parallel").
//
// Every promise of a plain client holds:
//
//   - At most once: a pipeline holding a NoRetry command is never re-sent
//     by go-redis (onceCmd; go-redis checks every command of a pipeline).
//   - Bounded by ctx: Send returns by the time ctx ends, sent or not. A
//     command still waiting for its batch when ctx ends is taken out of the
//     queue and never sent (nothing can have run); one already in a batch
//     in flight is left, its outcome unknown, as Bounded leaves one.
//   - Order: a batch goes out only once a send in flight has returned, and
//     its commands are in the order they came; as on a plain client, a
//     command sent after another was left at its deadline may overtake it on
//     another connection (lockkit's give-back repeats for that reason:
//     lockkit.Lock.giveBack).
//
// A batch runs on a goroutine of its own (so that no caller waits past its
// ctx for others' commands) under its latest command's deadline and none of
// its callers' cancellations: a caller that gives up does not fail the rest
// of the batch.
type Combiner struct {
	c       Pipeliner
	limit   int // sends in flight before commands wait for a batch
	runners sync.Pool

	mu    sync.Mutex
	busy  int        // direct sends and batch runners in flight
	queue []*pending // waiting for the next batch, in order
}

// Pipeliner is a client that also makes pipelines: *redis.Client.
type Pipeliner interface {
	Processor
	Pipeline() redis.Pipeliner
}

// pending is a command waiting for its batch. Its fields but done are
// guarded by the Combiner's mu; done gets one value when its batch has
// returned. One whose waiter received that goes back to pendings; one whose
// waiter left does not (its batch may still send on done).
type pending struct {
	ctx   context.Context
	cmd   redis.Cmder
	done  chan struct{} // buffered: the runner never blocks on it
	taken bool          // in a batch
}

var pendings = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// runner is what a batch runner reuses from one batch to the next: a
// pipeline (go-redis's can be executed again), the commands handed to it,
// and the slice the next batch is gathered in.
type runner struct {
	pipe  redis.Pipeliner
	cmds  []redis.Cmder
	spare []*pending
}

// CombineLimit is goredis.New's limit of lock commands in flight, each on a
// connection of its own, before the next ones wait to go out as a batch: a
// few concurrent callers keep their single round trip; more share one.
const CombineLimit = 4

// NewCombiner returns a Combiner over c that sends up to limit commands (or
// batches) at once.
func NewCombiner(c Pipeliner, limit int) *Combiner {
	q := &Combiner{c: c, limit: max(1, limit)}
	q.runners.New = func() any { return &runner{pipe: c.Pipeline()} }
	return q
}

// Process sends cmd on the client, as it is: for commands that do not
// take part in batches.
func (q *Combiner) Process(ctx context.Context, cmd redis.Cmder) error {
	return q.c.Process(ctx, cmd)
}

// Send sends cmd at once or in the next batch and waits for its reply
// until ctx ends. It reports whether cmd holds its reply; when it does not,
// the caller must not read cmd.
func (q *Combiner) Send(ctx context.Context, cmd redis.Cmder) bool {
	q.mu.Lock()
	if q.busy < q.limit && len(q.queue) == 0 {
		q.busy++
		q.mu.Unlock()
		ok := true
		if boundsByCtx(q.c) || ctx.Done() == nil {
			_ = q.c.Process(ctx, cmd)
		} else {
			ok = Bounded(ctx, q.c, func() { _ = q.c.Process(ctx, cmd) })
		}
		q.sent()
		return ok
	}
	p := pendings.Get().(*pending)
	p.ctx, p.cmd, p.taken = ctx, cmd, false
	q.queue = append(q.queue, p)
	q.mu.Unlock()
	select {
	case <-p.done:
		q.recycle(p)
		return true
	case <-ctx.Done():
	}
	q.mu.Lock()
	select {
	case <-p.done: // the batch returned meanwhile
		q.mu.Unlock()
		q.recycle(p)
		return true
	default:
	}
	if !p.taken {
		// Never sent: out of the queue, and p is free again.
		if i := slices.Index(q.queue, p); i >= 0 {
			q.queue = slices.Delete(q.queue, i, i+1)
		}
		q.mu.Unlock()
		q.recycle(p)
		return false
	}
	// In a batch in flight: its runner still holds p.
	q.mu.Unlock()
	return false
}

func (q *Combiner) recycle(p *pending) {
	p.ctx, p.cmd = nil, nil
	pendings.Put(p)
}

// sent ends a direct send: the commands that waited meanwhile go out as a
// batch in its place, or its place is freed.
func (q *Combiner) sent() {
	q.mu.Lock()
	if len(q.queue) == 0 {
		q.busy--
		q.mu.Unlock()
		return
	}
	r := q.runners.Get().(*runner)
	batch := q.take(r)
	q.mu.Unlock()
	go q.run(r, batch)
}

// take empties the queue into a batch, and gathers the next one in r's
// spare slice; q.mu is held.
func (q *Combiner) take(r *runner) []*pending {
	batch := q.queue
	q.queue, r.spare = r.spare[:0], nil
	for _, p := range batch {
		p.taken = true
	}
	return batch
}

// run sends batch, then each batch that gathered meanwhile, until none did.
func (q *Combiner) run(r *runner, batch []*pending) {
	for {
		q.exec(r, batch)
		clear(batch[:cap(batch)])
		q.mu.Lock()
		r.spare = batch
		if len(q.queue) == 0 {
			q.busy--
			q.mu.Unlock()
			q.runners.Put(r)
			return
		}
		batch = q.take(r)
		q.mu.Unlock()
	}
}

// exec sends batch's commands as one pipeline, but those whose ctx has
// ended (their callers are leaving: never sent), and then tells each
// caller of a command it sent.
func (q *Combiner) exec(r *runner, batch []*pending) {
	var (
		parent   context.Context
		last     time.Time
		deadline = true
	)
	cmds := r.cmds[:0]
	sent := batch[:0] // batch compacted in place: each p is read before its slot is written
	for _, p := range batch {
		if p.ctx.Err() != nil {
			// Its caller is leaving: it is not sent, and gets no signal, so
			// Send reports no reply (its cmd holds none).
			continue
		}
		sent = append(sent, p)
		if d, ok := p.ctx.Deadline(); !ok {
			deadline = false
		} else if d.After(last) {
			last = d
		}
		if parent == nil {
			parent = p.ctx
		}
		cmds = append(cmds, p.cmd)
	}
	if len(sent) > 0 {
		_ = r.pipe.BatchProcess(parent, cmds...)
		ctx := context.WithoutCancel(parent)
		if deadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, last)
			defer cancel()
		}
		_, _ = r.pipe.Exec(ctx)
	}
	clear(cmds)
	r.cmds = cmds
	for _, p := range sent {
		p.done <- struct{}{} // p may be reused from here on
	}
}
