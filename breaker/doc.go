// Package breaker is lockkit's circuit-breaker policy, as an application sets
// it ([Settings], passed to lockkit.WithBreaker) and sees it (an [*OpenError],
// matching [ErrOpen], wrapped in lockkit.ErrUnavailable; a [State] in
// lockkit.Health). The state machine is github.com/sony/gobreaker/v2.
//
// The runtime keeps one breaker per backend node (named by its address: each
// Cluster master, each Redlock node) and sends every round trip for that
// node through it.
//
// # What counts as a backend failure
//
// The runtime sorts each error into a failure, a success or neither, in one
// place. A failure means the backend node is unreachable, too slow, or up but
// unable to serve locks:
//
//   - network errors: any [net.Error] (refused, reset, unreachable, DNS,
//     i/o timeout, …), [io.EOF], [io.ErrUnexpectedEOF], [net.ErrClosed] and
//     the errnos ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE, ETIMEDOUT,
//     EHOSTUNREACH, ENETUNREACH however they are wrapped;
//   - timeouts that are not the caller's: [context.DeadlineExceeded],
//     [os.ErrDeadlineExceeded] or a timing-out [net.Error] while the caller's
//     own ctx is still live (a per-command timeout fired);
//   - [redis.ErrPoolTimeout] ("redis: connection pool timeout"): no
//     connection came free in time, because the node is not answering;
//   - Redis error replies that say the node cannot serve now:
//     LOADING (dataset loading), READONLY (a replica, often a demoted
//     master after failover), MASTERDOWN (replica lost its master and
//     serves no stale data), CLUSTERDOWN,
//     BUSY (a script or function is running past the busy threshold; not
//     BUSYKEY or BUSYGROUP), NOREPLICAS (min-replicas-to-write unmet),
//     MISCONF (writes stopped after a failed RDB save), OOM (maxmemory
//     reached with noeviction), and "ERR max number of clients reached"
//     (go-redis usually shows that one as a broken pipe or EOF, which
//     count anyway).
//     The same codes inside a Redis 6 style script error ("ERR Error running
//     script … -READONLY …") count too.
//
// An ignored error says nothing about the node, and is neither a
// failure nor a success:
//
//   - the caller's own ctx ended: [context.Canceled], or a timeout of any
//     kind (including the i/o timeout go-redis reports when it put the ctx
//     deadline on the socket), or the ctx's cause, once the caller's ctx is
//     done or its deadline has passed;
//   - [context.Canceled] from any ctx (cancellation is never the backend's
//     doing);
//   - [redis.ErrClosed] (this process closed its client) and
//     [redis.ErrPoolExhausted] (the client's own MaxActiveConns cap);
//   - TRYAGAIN: a multi-key request while its slot migrates during a Cluster
//     resharding. The master is healthy; counting it would let a resharding
//     open the breaker of a master that serves every other key.
//   - while the circuit is closed, a timeout during which this process was
//     itself not scheduled for at least an eighth of the wait (and 50ms):
//     under a CPU limit the reply waits in the socket while the deadline
//     passes, and counting it would open the circuit against a healthy node.
//     A half-open probe's timeout counts as a failure all the same: ignored,
//     it would free its slot for the next request, so a starved process
//     would keep probing a node that may still be down, each request
//     waiting for the command timeout.
//
// Everything else is a success: the node answered. That includes
// contention ([redis.Nil], a nil reply), NOSCRIPT (the runtime falls back
// to EVAL), WRONGTYPE, BUSYKEY, NOAUTH and other error replies, and errors
// the runtime makes itself after a round trip. The breaker tracks the
// node's health, not the outcome of the operation.
//
// A caller whose ctx is shorter than the client's per-command timeouts
// therefore never trips the breaker by timing out; it still does on a
// refused or reset connection.
//
// # Defaults
//
// A zero [Settings] means these defaults; each field may be changed on its
// own:
//
//   - ConsecutiveFailures 5 ([DefaultConsecutiveFailures]): trip after 5
//     failures in a row;
//   - FailureRatio 0: the ratio rule is off; when set, trip once
//     failures/(failures+successes) reaches it over at least MinRequests
//     counted requests ([DefaultMinRequests], 20) within one Interval;
//   - Interval 10s ([DefaultInterval]): the closed state's counts are
//     cleared every Interval;
//   - OpenTimeout 2s ([DefaultOpenTimeout]): how long the circuit stays
//     open before letting probes through (half-open);
//   - HalfOpenProbes 1 ([DefaultHalfOpenProbes]): how many requests may be
//     in flight while half-open; that many successes in a row close the
//     circuit, and any failure opens it again.
//
// # Open means fail closed
//
// While the circuit is open, and while half-open with all probe slots
// taken, the breaker fails the request at once with an [*OpenError]
// (errors.Is(err, [ErrOpen]) is true) that names the node, since when it has
// been open and how long until the next probe. Nothing is sent to the node
// and nothing is assumed about it: a request the breaker refuses has failed,
// so no lease is granted while the backend is uncertain.
package breaker
