// Package driver is the public seam between lockkit's Client and the stores
// that hold leases: a backend (the store's I/O), the request it serves, the
// error vocabulary it answers in, and the Capabilities it declares. A
// backend may live outside this module; it imports this package and its
// store's client, never lockkit, and passes driver/drivertest.
// A backend does one deployment's I/O and nothing else: take a
// key (issuing its fence, where it issues one), keep it alive, give it back,
// and answer a ping. Retry, circuit breakers, telemetry, lease tracking,
// renewal and local deadlines are applied once, by the Client, for every
// backend; a backend never sleeps, retries, logs or records telemetry.
//
// The vocabulary is shared: a held lock is ErrContended; anything else a
// backend returns is a failure of the backend (the Client reports it as
// lockkit.ErrUnavailable). A backend classifies its own errors for the
// Client's circuit breaker: Failure marks a server failure the breaker
// counts, Capacity a local shortage (no free connection) it does not.
package driver

import (
	"context"
	"errors"
	"time"
)

// ErrContended is a backend's answer when the lock is held by another owner:
// an expected outcome, which the Client reports as lockkit.ErrNotAcquired.
var ErrContended = errors.New("lockkit: held")

// Request is one acquisition.
type Request struct {
	Key     string        // the full lock key, prefix included
	Token   string        // this lease's owner id: 128 random bits, text-encoded
	Holder  string        // a short description of the holder (host, pid, owner, trace id); may be ""
	TTL     time.Duration // how long the backend keeps the lock without a keep-alive; whole milliseconds
	Fencing bool          // issue a fence, strictly increasing per key, in the same step as the grant

	// Replicas, when > 0, asks a replicated backend to grant only once that
	// many replicas hold the lock, waiting at most ReplicaTimeout. Backends
	// without replicas ignore it.
	Replicas       int
	ReplicaTimeout time.Duration

	// TTLFrom is set by Acquire, when it grants on a TTL that the store
	// began counting before this call (a lease renewed a moment earlier,
	// reused without a renewal of its own: etcd's recent spare lease), to a
	// local time no later than that start: the send of that earlier
	// renewal. The Client then counts the lease's validity from TTLFrom
	// instead of from its send of Acquire. Zero (the Client clears it before
	// every call): from the send. A backend that wraps another passes the
	// same Request, or copies TTLFrom back.
	TTLFrom time.Time
}

// Backend is where leases live.
//
// Every method is bounded by ctx, which carries the Client's command
// deadline. Implementations are safe for concurrent use.
type Backend interface {
	// Acquire takes req.Key for req.Token. It returns the fence (0 when
	// req.Fencing is off), ErrContended when another owner holds the key,
	// or a backend error. After an error other than ErrContended the key
	// may or may not be held for req.Token: the Client releases it.
	Acquire(ctx context.Context, req *Request) (fence int64, err error)

	// Extend keeps key held for token for another ttl. held is false,
	// with a nil error, when the key no longer holds token: the lease is
	// lost. A backend whose locks live as long as a session does (no TTL
	// on the server) checks that session here.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (held bool, err error)

	// Release gives key back if it still holds token; held reports whether
	// it did. Nothing is changed when it does not.
	Release(ctx context.Context, key, token string) (held bool, err error)

	// Ping checks that the backend answers.
	Ping(ctx context.Context) error

	// Close frees what the backend holds of its own (sessions, goroutines).
	// It does not close the clients it was given.
	Close() error

	// Capabilities declares what the backend can and cannot do. It is
	// read once, when the Client opens the backend, and must not change.
	Capabilities() Capabilities
}

// Capabilities is what a backend declares about its store, in one value: the
// TTLs it keeps, whether it issues fences, and which optional operations it
// has. A flag for an optional operation (FairQueue, ServerQueue, Batching,
// Routing, Holders) is a promise that the backend implements its interface
// (Queue, Waiter, Batcher, Router, HolderReader); the Client refuses to open a backend whose flags and methods
// disagree.
type Capabilities struct {
	// Name names the store the backend talks to (an address, a deployment):
	// the name of its circuit breaker and health entry. "" uses the Spec's
	// Name.
	Name string

	// MinTTL is the shortest TTL the store keeps; a domain with a shorter
	// one is refused, naming it. 0 means 1ms.
	MinTTL time.Duration
	// TTLGranularity is the unit the store counts TTLs in; a domain's TTL
	// must be a whole multiple of it. 0 means 1ms.
	TTLGranularity time.Duration
	// MaxTTL is the longest TTL the store keeps; 0 means no limit.
	MaxTTL time.Duration

	// Fences reports whether Acquire issues fences worth the name
	// (strictly increasing per key). When false, NoFences says why, and
	// the Client refuses fencing domains with it.
	Fences   bool
	NoFences string

	// FairQueue: the backend implements Queue (FIFO waiting with push
	// wake-up).
	FairQueue bool
	// ServerQueue: the backend implements Waiter (FIFO waiting in a queue
	// the store keeps for blocked requests). A backend declares FairQueue or
	// ServerQueue, not both.
	ServerQueue bool
	// Batching: the backend implements Batcher (several keys in one
	// atomic step).
	Batching bool
	// Routing: the backend implements Router; the Client keeps one breaker
	// per node it names.
	Routing bool
	// Holders: the backend implements HolderReader (who holds a key, and
	// its fence), which an election domain needs.
	Holders bool

	// Failover names a deployment that replicates asynchronously and
	// fails over ("Redis Sentinel", "Redis Cluster"): a lock the primary
	// granted can be lost in a failover unless the grant waited for
	// replicas, and the Client warns about fencing domains that set no
	// replicas on it. "" when the store is not such a deployment.
	Failover string

	// Quorum marks a backend built from member backends that it decides
	// over by majority (Redlock). Its members were guarded by Config.Guard,
	// each with its own breaker, when it was opened; the Client does not
	// guard it as a whole, and its health stays green while at most
	// Tolerated member breakers are open.
	Quorum    bool
	Tolerated int
}

// ErrFailure is matched by an error that a backend marked with Failure.
var ErrFailure = errors.New("lockkit: server failure")

// ErrCapacity is matched by an error that a backend marked with Capacity.
var ErrCapacity = errors.New("lockkit: no local capacity")

// Failure marks err as the store's failure to serve locks now (shutting
// down, starting up, connection lost), which the Client's breaker counts.
// Network errors and context deadlines are recognised without it. The
// message is err's; errors.Is matches ErrFailure and err's chain.
func Failure(err error) error {
	if err == nil {
		return nil
	}
	return marked{err, ErrFailure}
}

// Capacity marks err as a local shortage (no free pool connection): the
// Client reports it as unavailable but does not count it against the
// breaker, as the server is fine. errors.Is matches ErrCapacity and err's
// chain.
func Capacity(err error) error {
	if err == nil {
		return nil
	}
	return marked{err, ErrCapacity}
}

type marked struct {
	error
	mark error
}

func (m marked) Unwrap() error        { return m.error }
func (m marked) Is(target error) bool { return target == m.mark }
