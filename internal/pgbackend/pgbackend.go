// Package pgbackend is lockkit's PostgreSQL backend: session advisory locks,
// one dedicated pool connection per held lease, a server-side idle limit as
// the TTL, and fences from a durable table issued in the grant's statement.
// It does I/O only (see package driver): no retries, sleeps, logs or
// telemetry.
//
// # How a lease holds its lock
//
// Acquire takes a connection from the application's pgxpool.Pool (waiting at
// most Options.ConnWait, and never holding more than Options.MaxHeld at once)
// and runs one statement on it: pg_try_advisory_lock(KeyID(key)), the fence
// upsert when asked, and set_config('idle_session_timeout', ttl). The
// connection stays checked out for the whole hold; its session owns the lock.
// Because every held lease has a session of its own, two goroutines of one
// process exclude each other exactly as two processes do, although advisory
// locks are re-entrant within a session.
//
// Why a connection per lease rather than a few backend-owned sessions that
// multiplex many locks behind an in-process exclusion map
// (BenchmarkParallel16Paired: 16 goroutines each taking and releasing its own
// key, the two ways interleaved, 2 busy shared CPUs): on loopback one shared
// session was 1.08–1.64× slower per acquire+release than dedicated
// connections (six runs, about 1.2× typically); with 1ms added to every reply, as a network
// would, it was 7.7–8.6× slower (3.1–3.5ms against 0.38–0.46ms), because
// every statement of every lease, renewals included, waits its turn on one
// connection. A shared session also has one idle limit for locks of
// different TTLs, and loses all of its locks at once when it ends. The cost
// of a connection per lease is that held locks take connections: MaxHeld
// (default half the pool) keeps them from taking the application's whole
// pool, and a full pool or MaxHeld is an ErrNoSession error after ConnWait,
// never a hang. Applications that hold many locks at once should give the
// backend a pool of its own.
//
// # Waiting
//
// Acquire tries once (pg_try_advisory_lock); the Client polls it with
// backoff. AcquireWait waits in PostgreSQL's FIFO lock queue instead. With
// 16 contenders over 4 pools and 1 ms holds (TestWaitStrategies, 3–5s per
// strategy), polling let the releaser take the lock straight back 78–99% of
// the time, with wait p99 0.26–2.6s and a worst wait of 1.9–5.8s; the queue
// handed it over in arrival order (0% re-takes), wait p99 77–132ms, worst
// 159–303ms, at 418–497 critical sections/s against 274–456 for polling.
//
// # The TTL
//
// A session lock never expires while its session lives, and a stopped process
// keeps its session (its kernel still answers TCP keepalives). So the holding
// session gets idle_session_timeout = ttl: the server ends a session that has
// sent nothing for ttl, and its lock with it. Extend, which the Client sends
// every renew interval (< ttl), is a statement on that session, so a live
// holder is never idle that long; a paused or cut-off one is, and loses the
// lock within about ttl. The server's idle clock starts when a statement
// ends, later than the Client's (which starts before the request is sent),
// so the server never frees a lock before the Client's own deadline for it.
//
// Release unlocks, runs pg_advisory_unlock_all() and restores the session's
// idle_session_timeout before the connection goes back to the pool; when
// anything about that is uncertain the connection is closed instead (which
// frees whatever it held), never returned.
package pgbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
)

// ErrNoSession is wrapped by an acquire that found no connection to hold
// the lock on within Options.ConnWait: MaxHeld leases are held (or being
// acquired) already, or the pool has no free connection. It is a backend
// failure, not contention.
var ErrNoSession = errors.New("lockkit/pg: no free connection to hold a lock on")

// DefaultConnWait is Options.ConnWait's default.
const DefaultConnWait = 500 * time.Millisecond

// Options tune a Backend. The zero value is the default.
type Options struct {
	// MaxHeld caps the connections the backend takes from the pool at once
	// (held leases plus acquires in flight), so that held locks cannot take
	// the whole pool from the application. 0 means half the pool's MaxConns,
	// at least 1. Give the backend a pool of its own and set MaxHeld to its
	// MaxConns to let locks use all of it.
	MaxHeld int
	// ConnWait bounds how long an acquire waits for a connection (a MaxHeld
	// slot, then the pool) before failing with ErrNoSession. 0 means
	// DefaultConnWait; ctx's deadline bounds it too.
	ConnWait time.Duration
}

// Backend implements driver.Backend over a pgxpool.Pool. It is safe for
// concurrent use.
type Backend struct {
	pool     *pgxpool.Pool
	maxHeld  int
	connWait time.Duration
	slots    chan struct{} // one token per connection the backend has out of the pool

	mu      sync.Mutex
	leases  map[leaseID]*lease // held, or being acquired (conn nil)
	holding map[string]int     // held leases by key
	trying  map[string]int     // non-queued acquires in flight by key
	gates   map[string]*gate   // queued acquires' in-process line, by key
	closed  bool
}

type leaseID struct{ key, token string }

// gate lets one queued acquire of a key at a time, per backend, wait in
// PostgreSQL's queue (and then hold the lock); the others of this process
// wait for it in line here (Go serves blocked channel senders in order), on
// no connection. So waiters cost one connection per key and process, not
// one each, and PostgreSQL's queue stays fair between processes.
type gate struct {
	ch   chan struct{} // holds a token while an acquire is past the gate
	refs int           // acquires using the gate; it is dropped at 0
}

var _ driver.Backend = (*Backend)(nil)

// lease is one held lock and the connection whose session holds it.
type lease struct {
	token string
	id    int64

	mu   sync.Mutex // serializes Extend and Release on conn
	conn *pgxpool.Conn
	prev string        // the session's idle_session_timeout before the acquire, restored on release
	ttl  time.Duration // the idle limit in force
	dead bool          // the session is gone or was closed: the lock is not held

	leave func() // a queued acquire's: lets the next local waiter through its gate; nil otherwise

	validUntil time.Time     // the latest the Client can count the lease valid: last grant or renewal sent + its ttl
	inflight   chan struct{} // closed when the Extend statement in flight on conn ends; nil when none is
	orphan     *pgxpool.Conn // released while a renewal was in flight: that statement closes it when it ends
}

// New returns a backend that holds its locks on connections of pool. It does
// not close pool.
func New(pool *pgxpool.Pool, opts Options) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("lockkit/pg: nil pool")
	}
	if !madePool(pool) {
		return nil, errors.New("lockkit/pg: the pgxpool.Pool was not made by pgxpool.New or NewWithConfig (a zero Pool)")
	}
	if opts.MaxHeld < 0 {
		return nil, fmt.Errorf("lockkit/pg: MaxHeld %d is negative", opts.MaxHeld)
	}
	if opts.ConnWait < 0 {
		return nil, fmt.Errorf("lockkit/pg: ConnWait %v is negative", opts.ConnWait)
	}
	maxConns := int(pool.Config().MaxConns)
	if opts.MaxHeld == 0 {
		opts.MaxHeld = max(1, maxConns/2)
	}
	if opts.MaxHeld > maxConns {
		return nil, fmt.Errorf("lockkit/pg: MaxHeld %d is more than the pool's MaxConns %d", opts.MaxHeld, maxConns)
	}
	if opts.ConnWait == 0 {
		opts.ConnWait = DefaultConnWait
	}
	return &Backend{
		pool:     pool,
		maxHeld:  opts.MaxHeld,
		connWait: opts.ConnWait,
		slots:    make(chan struct{}, opts.MaxHeld),
		leases:   make(map[leaseID]*lease),
		holding:  make(map[string]int),
		trying:   make(map[string]int),
		gates:    make(map[string]*gate),
	}, nil
}

// Acquire takes req.Key with pg_try_advisory_lock on a connection of its own
// and keeps that connection for the hold. It returns the fence (0 without
// req.Fencing), driver.ErrContended when the key is held (by any session,
// including another lease of this backend), an error wrapping ErrNoSession
// when no connection was free within ConnWait, or another error.
func (b *Backend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	return b.acquire(ctx, req, 0)
}

// AcquireWait is Acquire that waits in PostgreSQL's own queue for the lock,
// at most maxWait (and never past ctx's deadline): pg_advisory_lock under a
// statement-local lock_timeout. Waiters are granted in arrival order, and a
// release wakes the next waiter at once, with no polling. It returns
// driver.ErrContended when the wait runs out. Within one backend, queued
// acquires of one key line up in process (in arrival order) and only the
// first waits in PostgreSQL, on a pool connection (counted in MaxHeld): a
// key's waiters cost one connection per process, not one each.
func (b *Backend) AcquireWait(ctx context.Context, req *driver.Request, maxWait time.Duration) (int64, error) {
	if maxWait < time.Millisecond {
		return 0, fmt.Errorf("lockkit/pg: AcquireWait: maxWait %v is under a millisecond", maxWait)
	}
	return b.acquire(ctx, req, maxWait)
}

func (b *Backend) acquire(ctx context.Context, req *driver.Request, maxWait time.Duration) (int64, error) {
	if req == nil {
		return 0, errors.New("lockkit/pg: nil request")
	}
	if err := checkKeyTTL(req.Key, req.TTL); err != nil {
		return 0, err
	}
	if req.Token == "" {
		return 0, errors.New("lockkit/pg: empty token")
	}

	// When a lease of this backend holds the key, or another of its
	// acquires is trying it, the answer is ErrContended without a round trip
	// or a connection: same-process contenders do not add to the server's
	// load. A queued acquire (maxWait > 0) skips this and waits in
	// PostgreSQL's queue behind them.
	lid := leaseID{req.Key, req.Token}
	l := &lease{token: req.Token, id: KeyID(req.Key), ttl: req.TTL}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errors.New("lockkit/pg: backend closed")
	}
	if _, dup := b.leases[lid]; dup || maxWait == 0 && b.holding[req.Key]+b.trying[req.Key] > 0 {
		b.mu.Unlock()
		return 0, driver.ErrContended
	}
	b.leases[lid] = l
	if maxWait == 0 {
		b.trying[req.Key]++
	}
	b.mu.Unlock()
	held := false
	defer func() {
		b.mu.Lock()
		if maxWait == 0 {
			if b.trying[req.Key]--; b.trying[req.Key] <= 0 {
				delete(b.trying, req.Key)
			}
		}
		if !held && b.leases[lid] == l {
			delete(b.leases, lid)
		}
		b.mu.Unlock()
	}()

	if maxWait > 0 {
		deadline := time.Now().Add(maxWait)
		leave, err := b.enter(ctx, req.Key, maxWait)
		if err != nil {
			return 0, err
		}
		defer func() {
			if !held {
				leave()
			}
		}()
		l.mu.Lock()
		l.leave = leave
		l.mu.Unlock()
		if maxWait = time.Until(deadline); maxWait < time.Millisecond {
			return 0, driver.ErrContended
		}
	}

	budget, timed := time.Duration(0), false
	if dl, ok := ctx.Deadline(); ok {
		budget, timed = time.Until(dl), true
	}
	conn, err := b.takeConn(ctx)
	if err != nil {
		return 0, err
	}
	if dl, _ := ctx.Deadline(); timed && time.Until(dl) < budget/2 && !errors.Is(ctx.Err(), context.Canceled) {
		// The wait for a connection (ConnWait, as set) took most of ctx's
		// time (the command timeout) or outlasted it: the statement gets
		// that time afresh, and ctx's cancellation still ends it.
		var cancel context.CancelFunc
		parent := ctx
		ctx, cancel = context.WithTimeout(context.WithoutCancel(parent), budget)
		defer cancel()
		defer context.AfterFunc(parent, func() {
			if errors.Is(parent.Err(), context.Canceled) {
				cancel()
			}
		})()
	}
	var (
		query string
		args  = []any{l.id, ttlString(req.TTL)}
	)
	switch {
	case maxWait == 0 && !req.Fencing:
		query = sqlTry
	case maxWait == 0:
		query, args = fenceQuery(req.Key, sqlTryFence, sqlTryFenceLong, append(args, req.Key))
	default:
		wait := maxWait
		if dl, ok := ctx.Deadline(); ok {
			// End the wait on the server before ctx ends it on the client
			// (which would close the connection), leaving a quarter of
			// what remains, at least 25ms, for the round trip.
			left := time.Until(dl)
			wait = min(wait, left-max(left/4, 25*time.Millisecond))
		}
		if wait < time.Millisecond {
			b.giveBack(conn)
			return 0, fmt.Errorf("lockkit/pg: AcquireWait: ctx leaves no time to wait: %w", context.DeadlineExceeded)
		}
		query, args = sqlWait, append(args, msString(wait))
		if req.Fencing {
			query, args = fenceQuery(req.Key, sqlWaitFence, sqlWaitFenceLong, append(args[:2], req.Key, msString(wait)))
		}
	}

	var (
		ok    bool
		prev  string
		fence int64
		set   *string
	)
	l.validUntil = time.Now().Add(req.TTL) // not shared yet: the lease has no conn
	err = conn.QueryRow(ctx, query, args...).Scan(&ok, &prev, &fence, &set)
	switch {
	case err == nil && ok:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.dead { // Close ran meanwhile
			b.discard(conn)
			return 0, errors.New("lockkit/pg: backend closed")
		}
		l.conn, l.prev = conn, prev
		held = true
		b.mu.Lock()
		if b.leases[lid] == l { // not dropped by Close
			b.holding[req.Key]++
		}
		b.mu.Unlock()
		return fence, nil
	case err == nil:
		// Not taken: the statement changed nothing on the session.
		b.giveBack(conn)
		return 0, driver.ErrContended
	case maxWait > 0 && sqlState(err) == "55P03":
		// lock_timeout ran out in the queue: the statement was aborted
		// before the lock was granted, and its settings rolled back.
		b.giveBack(conn)
		return 0, driver.ErrContended
	}
	// The lock may have been taken before the statement failed (a session
	// lock outlives its aborted transaction): close the session, which
	// frees it.
	b.discard(conn)
	if req.Fencing {
		err = wrapFenceErr(err)
	}
	return 0, fmt.Errorf("lockkit/pg: acquire: %w", err)
}

// enter waits, at most wait, for key's gate. It returns ErrContended when
// the wait runs out.
func (b *Backend) enter(ctx context.Context, key string, wait time.Duration) (leave func(), err error) {
	b.mu.Lock()
	g := b.gates[key]
	if g == nil {
		g = &gate{ch: make(chan struct{}, 1)}
		b.gates[key] = g
	}
	g.refs++
	b.mu.Unlock()
	drop := func() {
		b.mu.Lock()
		if g.refs--; g.refs == 0 {
			delete(b.gates, key)
		}
		b.mu.Unlock()
	}
	select {
	case g.ch <- struct{}{}:
	default:
		tm := time.NewTimer(wait)
		defer tm.Stop()
		select {
		case g.ch <- struct{}{}:
		case <-tm.C:
			drop()
			return nil, driver.ErrContended
		case <-ctx.Done():
			drop()
			return nil, fmt.Errorf("lockkit/pg: acquire: waiting in line behind this process's other waiters: %w", context.Cause(ctx))
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-g.ch
			drop()
		})
	}, nil
}

// takeConn takes a MaxHeld slot, then a pool connection, waiting at most
// connWait for both together.
//
// ConnWait is honoured as set, even past ctx's deadline (the Client's
// command timeout): running out of connections is a capacity failure
// (ErrNoSession), never a timeout that a circuit breaker would count. ctx's
// cancellation ends the wait at once.
func (b *Backend) takeConn(ctx context.Context) (*pgxpool.Conn, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.connWait)
	defer cancel()
	defer context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})()
	select {
	case b.slots <- struct{}{}:
	default:
		select {
		case b.slots <- struct{}{}:
		case <-wctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil, fmt.Errorf("lockkit/pg: acquire: waiting for a connection: %w", context.Cause(ctx))
			}
			return nil, fmt.Errorf("%w within %v: this backend already holds or is acquiring %d locks, its limit "+
				"(Options.MaxHeld; the pool has MaxConns %d): release locks, raise MaxHeld, or give locks a pool of their own",
				ErrNoSession, b.connWait, b.maxHeld, b.pool.Config().MaxConns)
		}
	}
	conn, err := b.pool.Acquire(wctx)
	if err != nil {
		mine := len(b.slots) - 1 // not counting this acquire's
		<-b.slots
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, fmt.Errorf("lockkit/pg: acquire: waiting for a connection: %w", context.Cause(ctx))
		}
		if wctx.Err() != nil {
			st := b.pool.Stat()
			if st.AcquiredConns()+st.ConstructingConns() < st.MaxConns() {
				return nil, fmt.Errorf("%w within %v: the pool did not open a connection in time (%d of MaxConns %d in use, %d of them by this backend's locks, %d being opened)",
					ErrNoSession, b.connWait, st.AcquiredConns(), st.MaxConns(), mine, st.ConstructingConns())
			}
			return nil, fmt.Errorf("%w within %v: the pool is exhausted (%d of MaxConns %d connections in use, %d of them by this backend's locks, %d being opened): "+
				"raise the pool's MaxConns, or give locks a pool of their own", ErrNoSession, b.connWait,
				st.AcquiredConns(), st.MaxConns(), mine, st.ConstructingConns())
		}
		return nil, fmt.Errorf("lockkit/pg: acquire: connect: %w", err)
	}
	return conn, nil
}

// giveBack returns a connection whose session holds nothing of ours.
func (b *Backend) giveBack(conn *pgxpool.Conn) {
	conn.Release()
	<-b.slots
}

// discard closes a connection instead of returning it: its session ends, and
// every lock it holds with it.
func (b *Backend) discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	<-b.slots
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// drop forgets a held lease.
func (b *Backend) drop(lid leaseID, l *lease) {
	b.mu.Lock()
	if b.leases[lid] == l {
		delete(b.leases, lid)
		if b.holding[lid.key]--; b.holding[lid.key] <= 0 {
			delete(b.holding, lid.key)
		}
	}
	b.mu.Unlock()
}

func (b *Backend) lookup(key, token string) *lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leases[leaseID{key, token}]
}

// Extend checks, on the holding session, that it still holds the lock, and
// moves the session's idle limit to ttl if it changed. held is false (nil
// error) when the session is gone: ended by the server (pg_terminate_backend,
// the idle limit, a restart), or closed here after an earlier failure; the
// lease's key, connection and MaxHeld slot are released at once then. An
// error means it cannot tell: no answer within ctx.
//
// A connection that carries a lease is never closed while the lease may still
// be valid on the Client's clock, since closing it frees the lock on the
// server. So the statement runs on a context of its own, bounded by the
// lease's latest possible deadline (the last successful grant or renewal's
// send time + its ttl), not by ctx: when ctx ends first, Extend returns an
// error and the statement keeps waiting for its answer, the session keeps its
// lock, and the next Extend or Release waits for that answer first.
func (b *Backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if err := checkKeyTTL(key, ttl); err != nil {
		return false, err
	}
	l := b.lookup(key, token)
	if l == nil {
		return false, nil
	}
	if err := l.await(ctx); err != nil {
		return false, fmt.Errorf("lockkit/pg: extend: the previous renewal is still unanswered: %w", err)
	}
	l.mu.Lock()
	if l.conn == nil || l.dead {
		l.mu.Unlock()
		return false, nil
	}
	if l.conn.Conn().IsClosed() {
		b.lose(leaseID{key, token}, l)
		l.mu.Unlock()
		return false, nil
	}
	classid, objid := lockIDs(l.id)
	conn, sent, same := l.conn, time.Now(), ttl == l.ttl
	// Past the lease's last possible deadline the Client counts it lost
	// already, and closing the connection (as pgx does on a timeout) is safe.
	qctx, cancel := context.WithDeadline(context.Background(), l.validUntil)
	if !l.validUntil.After(sent) {
		qctx, cancel = context.WithCancel(ctx)
	}
	done := make(chan struct{})
	l.inflight = done
	var (
		held bool
		err  error
	)
	go func() {
		defer close(done)
		defer cancel()
		if same {
			err = conn.QueryRow(qctx, sqlHeld, classid, objid).Scan(&held)
		} else {
			var set *string
			err = conn.QueryRow(qctx, sqlHeldTTL, classid, objid, ttlString(ttl)).Scan(&held, &set)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.inflight = nil
		switch {
		case l.conn != conn:
			// Closed or released meanwhile: whoever took conn owns it now,
			// unless it was left to this statement to finish with.
			if l.orphan == conn {
				l.orphan = nil
				b.discard(conn)
			}
		case err == nil && held:
			l.ttl = ttl
			l.validUntil = sent.Add(ttl)
		case err == nil || sessionGone(err) || conn.Conn().IsClosed():
			// Not held, or the session is gone (the server ended it, or the
			// statement ran past the lease's last possible deadline).
			held, err = false, nil
			b.lose(leaseID{key, token}, l)
		}
	}()
	l.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return false, fmt.Errorf("lockkit/pg: extend: no answer within the command timeout (the session is kept, with its lock): %w", context.Cause(ctx))
	}
	if err != nil {
		return false, fmt.Errorf("lockkit/pg: extend: %w", err)
	}
	return held, nil
}

// await waits, at most until ctx ends, for the answer to an Extend statement
// still in flight on l's session.
func (l *lease) await(ctx context.Context) error {
	l.mu.Lock()
	ch := l.inflight
	l.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// lose ends a lease whose lock is gone: its connection is closed, and its
// key and MaxHeld slot are freed at once, whether or not it is ever
// released. l.mu is held.
func (b *Backend) lose(lid leaseID, l *lease) {
	l.dead = true
	if l.conn != nil {
		b.discard(l.conn)
		l.conn = nil
		b.drop(lid, l)
		if l.leave != nil {
			l.leave()
			l.leave = nil
		}
	}
}

// Release unlocks key if this lease holds it, restores the session and
// returns its connection to the pool. held is false when the session was
// gone already. When the unlock's outcome is unknown the connection is
// closed (so the server frees the lock) and the error returned.
func (b *Backend) Release(ctx context.Context, key, token string) (bool, error) {
	if key == "" {
		return false, errors.New("lockkit/pg: empty lock key")
	}
	l := b.lookup(key, token)
	if l == nil {
		return false, nil
	}
	werr := l.await(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return false, nil // still being acquired, or released already
	}
	conn := l.conn
	l.conn = nil
	defer b.drop(leaseID{key, token}, l)
	if l.leave != nil {
		defer l.leave() // after the connection is back: the next local waiter may need it
	}
	if l.inflight != nil {
		// A renewal is still unanswered on conn: the lease is released on
		// the Client, so conn is closed (freeing the lock) as soon as that
		// statement ends, by its own deadline at the latest.
		l.orphan = conn
		return false, fmt.Errorf("lockkit/pg: release: a renewal is still unanswered; the session is closed when it ends: %w", werr)
	}
	if l.dead || conn.Conn().IsClosed() {
		b.discard(conn)
		return false, nil
	}
	var (
		held bool
		all  *string
		set  *string
	)
	err := conn.QueryRow(ctx, sqlUnlock, l.id, l.prev).Scan(&held, &all, &set)
	if err != nil {
		b.discard(conn)
		if sessionGone(err) {
			return false, nil
		}
		return false, fmt.Errorf("lockkit/pg: release: %w (the session was closed, which frees the lock)", err)
	}
	if !held {
		// Not ours any more, yet the session lives: do not reuse it.
		b.discard(conn)
		return false, nil
	}
	b.giveBack(conn)
	return true, nil
}

// Ping checks that the server answers. When every pool connection is out
// (held locks among them: a dedicated pool with MaxHeld = MaxConns is fully
// held when it is busiest), it asks over a connection of its own, opened and
// closed for the purpose, rather than wait behind them.
func (b *Backend) Ping(ctx context.Context) error {
	st := b.pool.Stat()
	if st.IdleConns() > 0 || st.AcquiredConns()+st.ConstructingConns() < st.MaxConns() {
		if err := b.pool.Ping(ctx); err != nil {
			return fmt.Errorf("lockkit/pg: ping: %w", err)
		}
		return nil
	}
	c, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("lockkit/pg: ping (the pool is fully in use; over a connection of its own): %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if err := c.Ping(ctx); err != nil {
		return fmt.Errorf("lockkit/pg: ping (the pool is fully in use; over a connection of its own): %w", err)
	}
	return nil
}

// Close closes the connections of the leases still held, which frees their
// locks, and makes later acquires fail. It does not close the pool.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	ls := make([]*lease, 0, len(b.leases))
	for k, l := range b.leases {
		ls = append(ls, l)
		delete(b.leases, k)
	}
	clear(b.holding)
	b.mu.Unlock()
	for _, l := range ls {
		l.mu.Lock()
		switch {
		case l.conn != nil && l.inflight != nil:
			l.orphan = l.conn // its renewal's statement closes it when it ends
			l.conn = nil
		case l.conn != nil:
			b.discard(l.conn)
			l.conn = nil
		}
		if l.leave != nil {
			l.leave()
		}
		l.dead = true
		l.mu.Unlock()
	}
	return nil
}

// Held is how many leases the backend holds a connection for now (granted
// and not yet released, including any whose session has since ended).
func (b *Backend) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.holding {
		n += c
	}
	return n
}

// CheckTTL refuses a TTL over the largest idle limit PostgreSQL accepts
// (INT_MAX ms, about 24.8 days): the Client asks when a domain is declared.
func (b *Backend) CheckTTL(ttl time.Duration) error {
	if ttl > maxTTL-time.Millisecond {
		return fmt.Errorf("ttl %v is over %v, the largest the PostgreSQL backend can keep (its idle limit is at most INT_MAX ms)", ttl, maxTTL-time.Millisecond)
	}
	return nil
}

// sessionGone reports whether err shows that the server ended the session:
// a FATAL error (pg_terminate_backend, idle_session_timeout, shutdown) or
// the connection closed by the other end. A timeout is not: the server may
// be alive behind it.
func sessionGone(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Severity == "FATAL" || pe.Severity == "PANIC" {
			return true
		}
		switch pe.Code[:2] {
		case "57", "08": // operator intervention (57P01 terminate, 57P05 idle session), connection exception
			return true
		}
		return pe.Code == "25P03" // idle_in_transaction_session_timeout
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Capabilities: TTLs (idle_session_timeout) in whole milliseconds; fences
// from the fence table; no queue or batching.
func (b *Backend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "postgres", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond, Fences: true}
}

// madePool reports whether pool was made by pgxpool (a zero Pool has no
// config, and its methods dereference it).
func madePool(pool *pgxpool.Pool) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return pool.Config() != nil
}
