package driver

import (
	"context"
	"errors"
	"time"
)

// The optional interfaces below are operations only some stores have. A
// backend declares each one it implements in its Capabilities.

// Router is implemented by a backend whose keys are served by several nodes
// (a Redis Cluster: one master per slot range), declared by
// Capabilities.Routing. The Client keeps one breaker per node name that
// NodeFor returns; an error means the backend cannot tell now (no slot map
// yet), and the key falls to the breaker of the deployment as a whole
// (Capabilities.Name). NodeFor must be cheap and bounded by ctx.
type Router interface {
	NodeFor(ctx context.Context, key string) (node string, err error)
}

// Batcher is implemented by a backend, declared by Capabilities.Batching, that can take several keys in one
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

// TTLChecker is implemented by a backend with a largest TTL of its own
// (PostgreSQL: the largest idle limit it accepts). The Client refuses a
// domain whose TTL CheckTTL reports, when the domain is declared.
type TTLChecker interface {
	CheckTTL(ttl time.Duration) error
}

// Config is what the Client passes when it opens a backend.
type Config struct {
	// CommandTimeout bounds each command the Client sends; a backend that
	// sends commands of its own (a clean-up release) bounds them by it too.
	CommandTimeout time.Duration
	// Guard wraps a member backend of a quorum backend in its own circuit
	// breaker, named name, with the Client's telemetry.
	Guard func(name string, member Backend) Backend
	// Warn logs a warning about the backend's configuration through the
	// Client's logger (once, at New). Nil logs nothing.
	Warn func(msg string, args ...any)
}

// Spec is how a backend's constructor (goredis.New, goredis.Redlock,
// postgres.New, or a third party's) hands a backend to lockkit.New: Open is called once, by
// New. Err, when set, is returned by New instead (a constructor's argument
// error, reported where the caller handles errors).
type Spec struct {
	Name string // the kind of backend: "redis", "redlock", "postgres"
	Open func(cfg Config) (Backend, error)
	Err  error
}

// ErrFinal, wrapped by a backend error, tells the Client not to retry: the
// backend cannot succeed on this request any more (an aborted transaction).
var ErrFinal = errors.New("lockkit: no retry possible")

// Queue is implemented by a backend, declared by Capabilities.FairQueue, that keeps a fair queue of waiters per
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

// Waiter is implemented by a backend, declared by Capabilities.ServerQueue,
// whose store keeps its own queue of blocked requests, granted in arrival
// order the moment the lock is released (PostgreSQL's lock manager:
// pg_advisory_lock). A FIFO domain on such a backend waits in that queue: the
// Client sends AcquireWait, which returns when the lock is granted or the
// wait runs out, and sends it again only after a backend error.
type Waiter interface {
	// AcquireWait is Acquire that waits in the store's queue, at most
	// maxWait and never past ctx (whose end takes the request out of the
	// queue). It returns ErrContended when maxWait runs out. waited is how
	// long after the call the store can have started the lock's TTL at the
	// earliest: the time the backend kept the request before sending it
	// (a line in process, a wait for a connection), on this clock, plus
	// how long after the store received it it granted it, on the store's
	// clock, rounded down. The lease's TTL counts from the request's send
	// (taken before the call) + waited, never from the reply (the store's
	// TTL may start before the reply arrives).
	AcquireWait(ctx context.Context, req *Request, maxWait time.Duration) (fence int64, waited time.Duration, err error)
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
	// Joined, when queued, is the token's place in the queue as the store
	// recorded it: the same while it stays queued there, higher after it
	// rejoins. On a pushed grant it is the place the handover found the
	// token at, and the Client takes the push as its grant only when that
	// is the Joined of its last answer that found it queued (0: never).
	Joined int64
	// Fallback is how long to wait for a push before asking again.
	Fallback time.Duration
}

// QueueWaiter is one queued token's registration for wake-ups.
type QueueWaiter interface {
	// Wait returns when a push or a resubscription wakes the waiter, or
	// fallback has passed, or ctx ends (its error); cause says which:
	// "push", "subscribed" or "timer".
	Wait(ctx context.Context, fallback time.Duration) (cause string, err error)
	// Granted is the grant the last handover's push carried, if one came
	// (its Joined says for which place in the queue; it may be stale).
	Granted() (QueueResult, bool)
	Close()
}

// ReplicaExtender is implemented by a backend whose primary copies its
// writes to replicas (Redis with Sentinel or Cluster replicas). ExtendReplicas
// is Extend followed, in the same round trip, by a wait until replicas
// replicas hold the new expiry, at most timeout. held is true with a nil error
// only when they did; too few is an error (the extend counts as failed: the
// caller's deadline stays where it was, and only the primary's copy may
// live longer, which delays the next holder and grants nothing).
type ReplicaExtender interface {
	ExtendReplicas(ctx context.Context, key, token string, ttl time.Duration, replicas int, timeout time.Duration) (held bool, err error)
}

// HolderReader is implemented by a backend, declared by Capabilities.Holders,
// that can say who holds a key now: what an election's Leader needs. The read
// takes nothing and changes nothing.
type HolderReader interface {
	// ReadHolder returns who holds key now; held is false when nobody
	// does.
	ReadHolder(ctx context.Context, key string) (h Holding, held bool, err error)
}

// Holding is who holds a key, as a HolderReader reads it.
type Holding struct {
	Token  string // the lease's token; "" when the store does not keep it (PostgreSQL)
	Holder string // the lease's description (Request.Holder); "" when the store keeps none
	Fence  int64  // the fence the lease was granted with; 0 without fencing
}
