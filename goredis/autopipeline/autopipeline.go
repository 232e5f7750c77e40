// Package autopipeline is lockkit's Redis backend with its lock commands on
// go-redis's autopipelining. It is a package of its own because that
// go-redis API is experimental ("subject to change"): a go-redis release
// that changes it can break the build of this package, and only of the
// programs that import it; package goredis does not use it.
package autopipeline

import (
	"context"
	"errors"

	"github.com/lockkit/lockkit/driver"
	_ "github.com/lockkit/lockkit/goredis" // sets seam.WithCommands
	"github.com/lockkit/lockkit/goredis/internal/seam"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// New is goredis.New for a standalone or Sentinel *redis.Client whose lock
// commands ride go-redis's autopipelining (rdb.AsyncAutoPipeline, an
// experimental go-redis API): the acquire, extend and release commands that
// many goroutines send at once go to Redis as one pipeline per round trip
// instead of one command each. Under parallel load it spends a fraction of
// the CPU per lock (docs/benchmarks.md, "Parallel"); a lone caller pays about
// what it pays on rdb. Every promise of goredis.New holds: each command is
// sent at most once (go-redis does not replay a batch that holds one) and
// returns within the command timeout (the wait ends then; the command,
// already queued, runs in order, its outcome unknown, as on a stalled
// connection). FIFO queues, sets of keys and replicas go through rdb as with
// goredis.New.
//
// The autopipeliner is rdb's own, made on the first call (go-redis keeps one
// per client, with rdb's Options.AutoPipelineOptions or its defaults). It
// must keep its commands in order, as it does by default, so that a
// give-back follows the command it gives back: lockkit.New fails when it is
// Unordered. Closing rdb closes it; the Client closes neither.
func New(rdb *redis.Client) driver.Spec {
	return seam.WithCommands("autopipeline.New", rdb, func() (rediswire.Processor, error) {
		ap, err := rdb.AsyncAutoPipeline()
		if err != nil {
			return nil, err
		}
		if ap.Config().Unordered {
			return nil, errUnordered
		}
		return queue{ap}, nil
	})
}

var errUnordered = errors.New("rdb's autopipeliner is Unordered (Options.AutoPipelineOptions, or an earlier AsyncAutoPipelineWithOptions): its batches may run in any order, and a give-back could overtake the acquire it gives back; leave it ordered, as it is by default")

// queue is an autopipeliner as a rediswire.Queue.
type queue struct{ *redis.AutoPipeliner }

// Send queues cmd in the next batch and waits for its reply until ctx ends
// (AutoFuture.WaitContext, which leaves cmd queued).
func (q queue) Send(ctx context.Context, cmd redis.Cmder) bool {
	err := q.Submit(ctx, cmd).WaitContext(ctx)
	return err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err())
}
