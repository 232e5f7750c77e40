package driver

import (
	"context"
	"errors"
	"time"
)

// The optional interfaces below let the Client keep one circuit breaker per
// node without a backend knowing about breakers: a backend says which node
// serves a key (Router), or is built from member backends that the Client
// guards one by one (Quorum). Breakers, their telemetry and health reports
// stay in the Client.

// Named is implemented by a backend that can name the node (or deployment) it
// talks to: the name of its breaker and of its health entry. Without it the
// Client uses the Spec's Name.
type Named interface {
	Name() string
}

// Router is implemented by a backend whose keys are served by several nodes
// (a Redis Cluster: one master per slot range). The Client keeps one breaker
// per node name that NodeFor returns; an error means the backend cannot tell
// now (no slot map yet), and the key falls to the breaker of the deployment
// as a whole (Named's name). NodeFor must be cheap and bounded by ctx.
type Router interface {
	NodeFor(ctx context.Context, key string) (node string, err error)
}

// Quorum is implemented by a backend built from member backends that it
// decides over by majority (Redlock). Its members were guarded by the
// Client's Config.Guard, each with its own breaker, when the backend was
// opened; the Client does not guard the quorum backend as a whole.
// Tolerated is how many members may have an open breaker while locks can
// still be granted (N − majority): health stays green up to that.
type Quorum interface {
	Tolerated() int
}

// Waiter is implemented by a backend that can wait for a held lock on the
// server, in a fair queue, rather than be polled. AcquireWait is Acquire that
// waits at most maxWait for the lock and returns ErrContended when it runs
// out.
type Waiter interface {
	AcquireWait(ctx context.Context, req *Request, maxWait time.Duration) (fence int64, err error)
}

// Batcher is implemented by a backend that can take several keys in one
// atomic step when they live together (one Redis server, or one Cluster hash
// slot). The Client asks CanBatch once per set: when it says no, the keys are
// taken one by one, in canonical order, with rollback.
type Batcher interface {
	// CanBatch reports whether AcquireAll can take every one of keys (lock
	// keys, distinct, in the set's canonical order) in one atomic step. It
	// must be cheap and do no I/O.
	CanBatch(keys []string) bool

	// AcquireAll takes every key of reqs, each for its own token, TTL and
	// fencing, or none of them: ErrContended when any key is held by
	// another owner, and then nothing was taken. fences[i] is reqs[i]'s
	// fence (0 without fencing). After an error other than ErrContended
	// any of the keys may or may not be held for its token: the Client
	// releases them all. When a request asks for replicas, the grant waits
	// for the most any request of the set asks for (WAIT covers every
	// write of the step), at most the longest ReplicaTimeout.
	AcquireAll(ctx context.Context, reqs []*Request) (fences []int64, err error)
}

// Capacity is implemented by a backend whose acquire can fail for want of a
// local resource (a free pool connection) rather than because the server
// failed. The Client reports such an error as unavailable but does not count
// it against the breaker: the server is fine.
type Capacity interface {
	IsCapacity(err error) bool
}

// Classifier is implemented by a backend whose failures the Client's
// breaker cannot recognise on its own (it knows network errors and Redis
// replies): IsFailure reports whether err means the server cannot serve
// locks now (shutting down, starting up, connection lost), so that the
// breaker counts it.
type Classifier interface {
	IsFailure(err error) bool
}

// FencingRefuser is implemented by a backend that cannot issue fences worth
// the name (Redlock). The Client refuses fencing domains on it with the error.
type FencingRefuser interface {
	FencingError() error
}

// Config is what the Client passes when it opens a backend.
type Config struct {
	// CommandTimeout bounds each command the Client sends; a backend that
	// sends commands of its own (a clean-up release) bounds them by it too.
	CommandTimeout time.Duration
	// Guard wraps a member backend of a quorum backend in its own circuit
	// breaker, named name, with the Client's telemetry.
	Guard func(name string, member Backend) Backend
}

// Spec is how a public constructor (lockkit.Redis, lockkit.Redlock,
// postgres.Backend) hands a backend to lockkit.New: Open is called once, by
// New. Err, when set, is returned by New instead (a constructor's argument
// error, reported where the caller handles errors).
type Spec struct {
	Name string // the kind of backend: "redis", "redlock", "postgres"
	Open func(cfg Config) (Backend, error)
	Err  error
}

// Public turns a Spec into a lockkit.Backend value. Package lockkit sets it
// when it is initialized, so that backend packages outside lockkit (which
// import it) can build the public value without lockkit exporting the seam.
var Public func(Spec) any

// DoOn runs lockkit's Lock.Do (lock, a lockkit.Lock; fn, a
// func(context.Context, *lockkit.Lease) error) with be in place of the
// Client's backend: for a lock that lives as long as a transaction
// (postgres.DoTx), with the Client's retries, telemetry, lease tracking,
// deadlines and error vocabulary. Package lockkit sets it.
var DoOn func(ctx context.Context, lock any, be Backend, fn any) error

// ErrFinal, wrapped by a backend error, tells the Client not to retry: the
// backend cannot succeed on this request any more (an aborted transaction).
var ErrFinal = errors.New("lockkit: no retry possible")

// Queue is implemented by a backend that keeps a fair queue of waiters per
// key, with push wake-up (Redis, internal/fifo): what a domain with FIFO
// waiting needs. The Client drives the wait, as it drives polling: it sends
// QueueAcquire (one attempt, which joins the queue when it fails), waits on
// the QueueWaiter for a push or its fallback timer, and sends QueueAcquire
// again; a handover's grant may arrive with the push (QueueWaiter.Granted).
// QueueRelease gives the lock back and hands it to the next waiter; it is
// also how a waiter leaves the queue (prev ""), which releases the key too
// if it holds the token (a grant whose reply was lost).
type Queue interface {
	QueueAcquire(ctx context.Context, req *Request) (QueueResult, error)
	QueueRelease(ctx context.Context, key, token, prev string) (held bool, err error)
	// QueueSubscribe registers token, queued on key, for wake-ups. It
	// never blocks on I/O. Close the waiter when the acquisition ends.
	QueueSubscribe(key, token string) QueueWaiter
}

// QueueResult is one QueueAcquire's answer (or a pushed handover's grant).
type QueueResult struct {
	Granted  bool
	Fence    int64
	Previous string // the previous holder's trace context, "" when none
	// Earlier marks a grant made before this answer (a handover): the lock
	// has LockTTL left, counted from the send of this call at the latest
	// (from the send of the last call before the handover for a pushed
	// grant).
	Earlier  bool
	Position int           // when queued: 1 is the head
	LockTTL  time.Duration // granted: what the lock has left; queued: the holder's PTTL
	// Fallback is how long to wait for a push before asking again.
	Fallback time.Duration
}

// QueueWaiter is one queued token's registration for wake-ups.
type QueueWaiter interface {
	// Wait returns when a push or a resubscription wakes the waiter, or
	// fallback has passed, or ctx ends (its error); cause says which:
	// "push", "subscribed" or "timer".
	Wait(ctx context.Context, fallback time.Duration) (cause string, err error)
	// Granted is the grant a handover's push carried, if one came.
	Granted() (QueueResult, bool)
	Close()
}
