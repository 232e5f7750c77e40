package lockkit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockkit/lockkit/internal/circuit"

	"github.com/lockkit/lockkit/internal/obs"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// guarded is a backend behind the Client's circuit breakers: one per node
// (per Cluster master when the backend is a Router). Only acquisitions go
// through a breaker; extend, release and ping pass through (they cannot grant
// a lock, and should succeed the moment the node is back). Each acquisition
// is bounded by the command timeout here.
type guarded struct {
	be         driver.Backend
	c          *Client
	name       string                 // the breaker of the whole deployment
	router     driver.Router          // nil: one breaker
	batcher    driver.Batcher         // nil: sets are taken one by one
	queue      driver.Queue           // nil: be keeps no FIFO queues
	waiter     driver.Waiter          // nil: be cannot wait in its store's own queue
	extender   driver.ReplicaExtender // nil: be has no replicas to wait for
	cmdTimeout time.Duration

	mu     sync.Mutex
	byNode map[string]*circuit.Breaker
	order  []*circuit.Breaker // in creation order, for health reports
}

// guard wraps be in breakers named after name (or its nodes), registered
// with c for health reports and telemetry.
func (c *Client) guard(name string, be driver.Backend) driver.Backend {
	g := &guarded{be: be, c: c, name: name, cmdTimeout: c.cmdTimeout, byNode: make(map[string]*circuit.Breaker)}
	caps := be.Capabilities()
	if caps.Routing {
		g.router, _ = be.(driver.Router)
	}
	if caps.Batching {
		g.batcher, _ = be.(driver.Batcher)
	}
	if caps.FairQueue {
		g.queue, _ = be.(driver.Queue)
	}
	if caps.ServerQueue {
		g.waiter, _ = be.(driver.Waiter)
	}
	g.extender, _ = be.(driver.ReplicaExtender)
	if g.router == nil {
		g.named(name, true)
	}
	c.brMu.Lock()
	c.guards = append(c.guards, g)
	c.brMu.Unlock()
	return g
}

// breakers lists every node breaker made so far, for health reports.
func (c *Client) breakers() []*circuit.Breaker {
	c.brMu.Lock()
	gs := c.guards
	c.brMu.Unlock()
	var out []*circuit.Breaker
	for _, g := range gs {
		g.mu.Lock()
		out = append(out, g.order...)
		g.mu.Unlock()
	}
	return out
}

// named returns the breaker called name, making it when create is set.
func (g *guarded) named(name string, create bool) *circuit.Breaker {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.byNode[name]
	if !ok && create {
		b = circuit.New(name, g.c.brSettings)
		g.byNode[name] = b
		g.order = append(g.order, b)
		g.c.tel.BreakerState(context.Background(), name, int(breaker.StateClosed))
	}
	return b
}

// forKey is the breaker of the node that serves key. When the backend cannot
// say (a Cluster with no slot map, e.g. a process started during an outage),
// the key falls to the breaker of the deployment as a whole, which then sees
// the failures. The lookup is skipped while that breaker is open, so an open
// breaker refuses at once even when there is no slot map to consult.
func (g *guarded) forKey(ctx context.Context, key string) *circuit.Breaker {
	if g.router == nil {
		return g.named(g.name, true)
	}
	if whole := g.named(g.name, false); whole != nil && whole.State() == breaker.StateOpen {
		return whole
	}
	node, err := g.router.NodeFor(ctx, key)
	if err != nil || node == "" {
		return g.named(g.name, true)
	}
	return g.named(node, true)
}

// Acquire runs be's acquisition through the key's node breaker: an open
// breaker refuses at once, and no lease is granted while the node is
// uncertain. ctx is the caller's: the breaker tells its ending apart from a
// command timeout. Contention counts as a success; a capacity error (no
// free connection) is not counted either way.
func (g *guarded) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	var fence int64
	err := g.guardedAcquire(ctx, req, func(ctx context.Context) error {
		var err error
		fence, err = g.be.Acquire(ctx, req)
		return err
	})
	return fence, err
}

// QueueAcquire is a FIFO attempt (driver.Queue) through the same breaker,
// bounded by the command timeout the same way: it can grant a lock.
func (g *guarded) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	var r driver.QueueResult
	err := g.guardedAcquire(ctx, req, func(ctx context.Context) error {
		var err error
		r, err = g.queue.QueueAcquire(ctx, req)
		return err
	})
	return r, err
}

// AcquireWait is a wait in the store's queue (driver.Waiter) through the
// same breaker, bounded by the command timeout past maxWait: it can grant a
// lock. A wait that runs out is contention, not a failure.
func (g *guarded) AcquireWait(ctx context.Context, req *driver.Request, maxWait time.Duration) (int64, time.Duration, error) {
	var (
		fence  int64
		waited time.Duration
	)
	err := g.guardedAcquireFor(ctx, req, maxWait, func(ctx context.Context) error {
		var err error
		fence, waited, err = g.waiter.AcquireWait(ctx, req, maxWait)
		return err
	})
	return fence, waited, err
}

// QueueRelease passes through, as Release does: it cannot grant this
// caller a lock, and a waiter must be able to leave while the node is sick.
func (g *guarded) QueueRelease(ctx context.Context, key, token, prev string) (bool, error) {
	return g.queue.QueueRelease(ctx, key, token, prev)
}

// QueueSubscribe does no I/O of its own; it passes through.
func (g *guarded) QueueSubscribe(key, token string) driver.QueueWaiter {
	return g.queue.QueueSubscribe(key, token)
}

// guardedAcquire runs one acquisition (acquire, sent by send under a ctx
// bounded by the command timeout) through the breaker of req.Key's node.
func (g *guarded) guardedAcquire(ctx context.Context, req *driver.Request, send func(context.Context) error) error {
	return g.guardedAcquireFor(ctx, req, 0, send)
}

// guardedAcquireFor is guardedAcquire whose command may take wait longer
// than the command timeout (a wait in the store's queue).
func (g *guarded) guardedAcquireFor(ctx context.Context, req *driver.Request, wait time.Duration, send func(context.Context) error) error {
	br := g.forKey(ctx, req.Key)
	if trace.SpanFromContext(ctx).IsRecording() {
		// Mark the acquisition whose outcome moved the breaker. Only when
		// traced: reading the state takes the breaker's lock twice.
		before := br.State()
		defer func() {
			if after := br.State(); after != before {
				obs.BreakerChanged(ctx, br.Name(), before.String(), after.String())
			}
		}()
	}
	var realErr error
	err := br.Do(ctx, func(ctx context.Context) error {
		d := g.cmdTimeout + req.ReplicaTimeout + wait
		// A timer, not only a deadline: see deadline.go.
		cctx, scope := g.c.withCommandTimeout(ctx, d)
		err := send(cctx)
		scope.end()
		realErr = err
		return g.failure(g.verdict(err), req.Key)
	})
	if err != nil && realErr == nil {
		return err // refused by the breaker
	}
	return realErr
}

// verdict is what the breaker is told of an acquisition's error: contention
// is an answer (a success); the rest, with the backend's marks
// (driver.Failure, driver.Capacity), is sorted by circuit.Classify.
func (g *guarded) verdict(err error) error {
	if errors.Is(err, driver.ErrContended) {
		return nil
	}
	return err
}

// failure is err as the breaker keeps it (LastFailure, quoted in the log
// line of its opening): its message quotes keys as log lines show them
// (logMsg); errors.Is and errors.As see err itself.
func (g *guarded) failure(err error, keys ...string) error {
	if err == nil || g.c.telOpts.KeyMode == telemetry.KeyRaw {
		return err
	}
	return &loggedErr{msg: g.c.logMsg(err.Error(), keys...), err: err}
}

// loggedErr is an error whose message is rewritten for log lines.
type loggedErr struct {
	msg string
	err error
}

func (e *loggedErr) Error() string { return e.msg }
func (e *loggedErr) Unwrap() error { return e.err }

var (
	_ driver.Batcher         = (*guarded)(nil)
	_ driver.ReplicaExtender = (*guarded)(nil)
)

// CanBatch is the backend's answer; false when it cannot batch at all.
func (g *guarded) CanBatch(keys []string) bool {
	return g.batcher != nil && g.batcher.CanBatch(keys)
}

// AcquireAll runs be's all-or-none acquisition through the breaker of the
// node that serves the set (its keys share one, or CanBatch said no; on a
// Cluster, the master of their slot), counted like one Acquire: the set is
// one command to one node.
func (g *guarded) AcquireAll(ctx context.Context, reqs []*driver.Request) ([]int64, error) {
	if g.batcher == nil {
		return nil, errors.New("lockkit: the backend cannot take a set in one step")
	}
	br := g.forKey(ctx, reqs[0].Key)
	if trace.SpanFromContext(ctx).IsRecording() {
		before := br.State()
		defer func() {
			if after := br.State(); after != before {
				obs.BreakerChanged(ctx, br.Name(), before.String(), after.String())
			}
		}()
	}
	var (
		fences  []int64
		realErr error
	)
	d := g.cmdTimeout
	for _, req := range reqs {
		d = max(d, g.cmdTimeout+req.ReplicaTimeout)
	}
	err := br.Do(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, d)
		fences, realErr = g.batcher.AcquireAll(cctx, reqs)
		cancel()
		keys := make([]string, len(reqs))
		for i, req := range reqs {
			keys[i] = req.Key
		}
		return g.failure(g.verdict(realErr), keys...)
	})
	if err != nil && realErr == nil {
		return nil, err // refused by the breaker
	}
	return fences, realErr
}

func (g *guarded) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return g.be.Extend(ctx, key, token, ttl)
}

// ExtendReplicas is Extend that waits for replicas when the backend has
// replicas to wait for (backend.ReplicaExtender), and a plain Extend
// otherwise, as an acquisition ignores Replicas there.
func (g *guarded) ExtendReplicas(ctx context.Context, key, token string, ttl time.Duration, replicas int, timeout time.Duration) (bool, error) {
	if replicas > 0 && g.extender != nil {
		return g.extender.ExtendReplicas(ctx, key, token, ttl, replicas, timeout)
	}
	return g.be.Extend(ctx, key, token, ttl)
}

func (g *guarded) Release(ctx context.Context, key, token string) (bool, error) {
	return g.be.Release(ctx, key, token)
}

func (g *guarded) Ping(ctx context.Context) error    { return g.be.Ping(ctx) }
func (g *guarded) Close() error                      { return g.be.Close() }
func (g *guarded) Capabilities() driver.Capabilities { return g.be.Capabilities() }
