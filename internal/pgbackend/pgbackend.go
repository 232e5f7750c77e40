// Package pgbackend is lockkit's PostgreSQL backend: session advisory locks,
// many to a session, on at most MaxHeld connections of the application's
// pool, a server-side idle limit as the TTL, and fences from a durable table
// issued in the grant's statement. It does I/O only (see package driver): no
// retries, sleeps, logs or telemetry.
//
// # How leases share sessions
//
// The backend keeps a set of sessions: pool connections it has checked out,
// at most Options.MaxHeld of them, each carrying any number of its locks.
// Acquire runs pg_try_advisory_lock(KeyID(key)) (and the fence upsert, when
// asked) on a session of the set: one that has no statement in flight if
// there is one, otherwise a new one while the set is under MaxHeld,
// otherwise the one with the fewest statements waiting. One statement runs
// on a connection at a time, so each session serializes its own statements;
// MaxHeld sessions run MaxHeld statements at once. Release is
// pg_advisory_unlock on the lease's session. A session with no lock left is
// given back to the pool (advisory locks dropped, idle limit restored) after
// sessionLinger, so a burst does not keep the application's connections.
//
// Advisory locks are re-entrant within a session, so the backend never puts
// two leases of one lock id on one session: an acquire whose key id a lease
// of this backend holds, or is trying, is ErrContended without a round trip
// (two goroutines of one process exclude each other as two processes do).
//
// Renewal costs one round trip per session, not per lease: an Extend joins
// the session's next check, a single statement that lists the advisory
// locks the session holds (pg_locks), sent after every Extend that joined
// it; each lease whose lock is listed is renewed, and each whose lock is not
// is lost. A session that is gone (pg_terminate_backend, the idle limit, a
// restart, a closed connection) loses exactly the leases it carried: each
// one's Extend answers held = false, and nothing else is touched.
//
// # Lease records (lock-delay)
//
// A session that ends frees its locks on the server before their holders
// know (they learn it at their next renewal). So every grant also writes
// the lease's record in LeaseTable (token, expiry = the server's clock +
// ttl), in the grant's statement, and refuses the grant (giving the lock
// back) while an earlier lease's record on the id is unexpired; the check
// moves the records of the session's leases forward, and a release deletes
// the record with the unlock. A lock freed under a lease that may still be
// valid is granted again only when that lease's record expires. See sql.go.
//
// # Waiting
//
// Acquire tries once; the Client polls it with backoff. AcquireWait
// (driver.Waiter) waits in PostgreSQL's own lock queue instead, which grants
// in arrival order: pg_advisory_lock under a statement-local lock_timeout, on
// a connection of its own (a blocked statement would hold up the renewals
// of every lease on a shared session), which joins the set, with its lock,
// when granted. With 16 contenders over 4 pools and 1 ms holds
// (TestWaitStrategies, 3–5s per strategy), polling let the releaser take the
// lock straight back 78–99% of the time, with wait p99 0.26–2.6s and a worst
// wait of 1.9–5.8s; the queue handed it over in arrival order (0% re-takes),
// wait p99 77–132ms, worst 159–303ms. Within one backend, queued acquires of
// one key line up in process (in arrival order) and only the first waits in
// PostgreSQL: a key's waiters cost one connection per process.
//
// # The TTL
//
// A session lock never expires while its session lives, and a stopped process
// keeps its session (its kernel still answers TCP keepalives). So a session
// that carries locks has idle_session_timeout = the longest TTL among them
// (it is raised when a lock with a longer TTL joins, and set afresh when an
// empty session takes its first lock; acquires prefer a session whose limit
// is the lock's TTL): the server ends a session that has sent nothing for
// that long, and its locks with it. Renewals, which the Client sends every
// renew interval (< ttl), are statements on that session, so a live holder
// is never idle that long; a paused or cut-off one is, and loses its locks
// within about the longest TTL on its session. The server's idle clock
// starts when a statement ends, later than the Client's (which starts before
// the request is sent), so the server never frees a lock before the Client's
// own deadline for it.
//
// A connection that carries a lease is never closed while any lease on it
// may still be valid on the Client's clock (closing it frees every lock it
// carries): each statement on a session runs on a context of its own,
// bounded by the latest deadline of the leases on it, and a caller whose ctx
// ends first gets an error while the statement goes on; its outcome is
// applied when it ends (a grant nobody waits for any more is unlocked).
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
// the lock on within Options.ConnWait: the backend has no session yet and
// the pool has no free connection (or MaxHeld connections wait in
// PostgreSQL's queue already). It is a backend failure, not contention.
var ErrNoSession = errors.New("lockkit/pg: no free connection to hold a lock on")

// DefaultConnWait is Options.ConnWait's default.
const DefaultConnWait = 500 * time.Millisecond

// sessionLinger is how long a session with no lock left stays in the set
// before it goes back to the pool.
const sessionLinger = time.Second

// Options tune a Backend. The zero value is the default.
type Options struct {
	// MaxHeld caps the connections the backend takes from the pool at once
	// (sessions that carry locks, and connections waiting in PostgreSQL's
	// queue), so that locks cannot take the whole pool from the
	// application. Any number of locks share them. 0 means half the pool's
	// MaxConns, at least 1.
	MaxHeld int
	// ConnWait bounds how long an acquire waits for a connection (a MaxHeld
	// slot, then the pool) before failing with ErrNoSession, when the
	// backend has no session it could use instead. 0 means
	// DefaultConnWait; ctx's cancellation ends it too.
	ConnWait time.Duration
	// RoundTrip is what the caller's deadline leaves a statement beyond
	// its wait: the Client's command timeout. AcquireWait keeps a quarter of
	// the time its ctx leaves for the reply, and never more than this, so a
	// wait bounded by MaxWait (the Client's ctx for it ends RoundTrip after
	// MaxWait) waits all of MaxWait. 0: no cap.
	RoundTrip time.Duration
}

// Backend implements driver.Backend and driver.Waiter over a pgxpool.Pool.
// It is safe for concurrent use.
type Backend struct {
	pool     *pgxpool.Pool
	maxHeld  int
	connWait time.Duration
	slots    chan struct{} // one token per connection the backend has out of the pool

	roundTrip time.Duration // Options.RoundTrip

	life     context.Context // ended by Close: waits in PostgreSQL's queue end with it
	stopLife context.CancelFunc

	// mu guards the backend's, its sessions' and its leases' state.
	mu       sync.Mutex
	sessions []*session
	leases   map[leaseID]*lease // held, or being acquired (s nil)
	holding  map[int64]int      // held leases by key id
	trying   map[int64]int      // non-queued acquires in flight by key id
	gates    map[string]*gate   // queued acquires' in-process line, by key
	// abandoned: acquires whose connection was closed with the statement's
	// outcome unknown (the server may still run it, and commit its lease
	// record, after the close), by token: the server process that ran it,
	// until the record would have expired. Release uses it (see there).
	abandoned map[leaseID]abandonedAcquire
	opening   int           // sessions being opened
	opened    chan struct{} // closed (and replaced) when an open ends
	closed    bool
}

type leaseID struct{ key, token string }

// abandonedAcquire is an acquire whose connection was closed mid-statement:
// pid is the server process that may still run it, and until the latest
// its lease record could be valid (the close + the TTL, on this clock).
type abandonedAcquire struct {
	pid   uint32
	until time.Time
}

// gate lets one queued acquire of a key at a time, per backend, wait in
// PostgreSQL's queue (and then hold the lock); the others of this process
// wait for it in line here (Go serves blocked channel senders in order), on
// no connection. So waiters cost one connection per key and process, not
// one each, and PostgreSQL's queue stays fair between processes.
type gate struct {
	ch   chan struct{} // holds a token while an acquire is past the gate
	refs int           // acquires using the gate; it is dropped at 0
}

var (
	_ driver.Backend      = (*Backend)(nil)
	_ driver.Waiter       = (*Backend)(nil)
	_ driver.HolderReader = (*Backend)(nil)
)

// session is one connection the backend has checked out of the pool, whose
// PostgreSQL session carries any number of the backend's locks. Its fields
// are guarded by Backend.mu, except op, conn (used by op's holder) and prev.
type session struct {
	conn *pgxpool.Conn
	prev saved         // the settings the backend changes, as they were before it took conn
	op   chan struct{} // holds a token while a statement is in flight (or being prepared) on conn
	gone chan struct{} // closed when the session is dead

	leases    map[int64]*lease // by key id: at most one lease per id
	limit     time.Duration    // idle_session_timeout in force
	keepUntil time.Time        // no lease on conn is valid on the Client after this (an upper bound)
	waiting   int              // acquires and releases waiting for op
	next      *round           // the check that Extends join; nil when none is open
	dead      bool             // conn is closed, or closed by op's holder: the session holds nothing
	retiring  bool             // takes no new lock; closed once its last lease is gone
	linger    *time.Timer      // gives the session back when it has been empty for sessionLinger
}

// saved is what a connection's settings were when the backend took it from
// the pool, restored when it gives the connection back. The backend sets
// idle_session_timeout (its locks' TTL) and statement_timeout (0: none of
// its statements is cancelled by the application's setting, which the
// backend would have to take as its session lost; a wait in the lock queue
// is one statement).
type saved struct{ idle, stmt string }

// round is one check of a session's locks, shared by the Extends that
// joined it before it was sent.
type round struct {
	done  chan struct{}
	ttl   time.Duration // the longest ttl asked for: the idle limit must cover it
	asked []*lease      // the leases whose Extend joined: only their records move
	err   error         // cannot tell (the session and its leases are kept)
}

// lease is one held lock: the session that carries it, and its bounds.
type lease struct {
	key, token string
	id         int64
	s          *session      // nil while being acquired
	ttl        time.Duration // the last ttl asked for
	validUntil time.Time     // the latest the Client can count the lease valid: last grant or check sent + its ttl
	dead       bool          // lost, released or closed
	releasing  bool          // released on the Client; its unlock waits for the session (unlockLater)
	leave      func()        // a queued acquire's: lets the next local waiter through its gate; nil otherwise
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
	if opts.RoundTrip < 0 {
		return nil, fmt.Errorf("lockkit/pg: RoundTrip %v is negative", opts.RoundTrip)
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
	life, stopLife := context.WithCancel(context.Background())
	return &Backend{
		pool:      pool,
		maxHeld:   opts.MaxHeld,
		connWait:  opts.ConnWait,
		roundTrip: opts.RoundTrip,
		slots:     make(chan struct{}, opts.MaxHeld),
		life:      life,
		stopLife:  stopLife,
		leases:    make(map[leaseID]*lease),
		holding:   make(map[int64]int),
		trying:    make(map[int64]int),
		gates:     make(map[string]*gate),
		abandoned: make(map[leaseID]abandonedAcquire),
		opened:    make(chan struct{}),
	}, nil
}

var errClosed = errors.New("lockkit/pg: backend closed")

// Acquire takes req.Key with pg_try_advisory_lock on one of the backend's
// sessions. It returns the fence (0 without req.Fencing),
// driver.ErrContended when the key is held (by any session, including
// another lease of this backend), an error wrapping ErrNoSession when it had
// no session and no connection was free within ConnWait, or another error.
func (b *Backend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	if err := checkRequest(req); err != nil {
		return 0, err
	}
	lid, id := leaseID{req.Key, req.Token}, KeyID(req.Key)
	l := &lease{key: req.Key, token: req.Token, id: id, ttl: req.TTL}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errClosed
	}
	if _, dup := b.leases[lid]; dup || b.holding[id]+b.trying[id] > 0 {
		// Held or being tried by this backend: no round trip, no session.
		b.mu.Unlock()
		return 0, driver.ErrContended
	}
	b.leases[lid] = l
	b.trying[id]++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.trying[id]--; b.trying[id] <= 0 {
			delete(b.trying, id)
		}
		if l.s == nil && b.leases[lid] == l {
			delete(b.leases, lid)
		}
		b.mu.Unlock()
	}()

	budget := timeLeft(ctx)
	s, err := b.pick(ctx, id, req.TTL)
	if err != nil {
		return 0, err
	}
	ctx, stop := refresh(ctx, budget)
	defer stop()
	b.mu.Lock()
	if s.dead || s.leases[id] != nil {
		b.mu.Unlock()
		b.endOp(s)
		if s.dead {
			return 0, fmt.Errorf("lockkit/pg: acquire: the session ended before the statement was sent")
		}
		return 0, driver.ErrContended
	}
	limit := ""
	if len(s.leases) == 0 && s.limit != req.TTL || req.TTL > s.limit {
		limit = ttlString(req.TTL)
	}
	qctx, cancel, inline := s.stmtCtx(ctx, nil)
	b.mu.Unlock()

	query, args := sqlTry, []any{id, limit, req.Token, ttlMs(req.TTL)}
	if req.Fencing {
		query, args = fenceQuery(req.Key, sqlTryFence, sqlTryFenceLong, []any{id, limit, req.Key, req.Token, ttlMs(req.TTL)})
	}
	var (
		ok    bool
		fence int64
		st    stmt
	)
	sent := time.Now()
	run := func() {
		err := s.conn.QueryRow(qctx, query, args...).Scan(&ok, &fence, nil, nil)
		cancel()
		b.mu.Lock()
		late := st.finish()
		st.err = err
		if err == nil && limit != "" {
			s.limit = req.TTL
		}
		switch {
		case s.dead:
			// Closed meanwhile (Close): endOp closes the connection.
		case err == nil && ok && !late && !b.closed && b.leases[lid] == l:
			l.s, l.validUntil = s, sent.Add(req.TTL)
			b.attach(s, l)
		case err == nil && !ok:
		case err != nil && (sessionGone(err) || s.conn.Conn().IsClosed()):
			b.kill(s)
			// op is still ours: endOp closes conn, which keeps its pid.
			b.abandonLocked(lid, s.conn.Conn().PgConn().PID(), req.TTL)
		default:
			// Granted but taken by nobody (the caller left, or Close ran),
			// or failed after the lock may have been taken (a session lock
			// outlives its aborted statement): unlock it, still holding op.
			// No lease of this backend holds id on s, so this frees
			// nothing else.
			b.mu.Unlock()
			uerr := b.unlockOn(s, id, req.Token)
			b.mu.Lock()
			if uerr != nil {
				b.taint(s, uerr)
			}
		}
		b.mu.Unlock()
		b.endOp(s)
	}
	if inline {
		run()
	} else {
		st.start(run)
		if err := st.wait(ctx, &b.mu); err != nil {
			return 0, fmt.Errorf("lockkit/pg: acquire: no answer within ctx (the statement goes on; a late grant is unlocked): %w", err)
		}
	}
	switch {
	case st.err != nil:
		return 0, fmt.Errorf("lockkit/pg: acquire: %w", wrapTableErr(st.err))
	case !ok:
		return 0, driver.ErrContended
	}
	b.mu.Lock()
	held := l.s != nil && !l.dead
	b.mu.Unlock()
	if !held {
		return 0, errClosed
	}
	return fence, nil
}

// checkRequest rejects what no lock can be taken with.
func checkRequest(req *driver.Request) error {
	if req == nil {
		return errors.New("lockkit/pg: nil request")
	}
	if err := checkKeyTTL(req.Key, req.TTL); err != nil {
		return err
	}
	if req.Token == "" {
		return errors.New("lockkit/pg: empty token")
	}
	return nil
}

// stmt is one statement run in a goroutine of its own, which the caller
// waits for at most until its ctx ends; done, late and err are guarded by
// the mutex given to wait.
type stmt struct {
	done     chan struct{}
	finished bool
	late     bool // the caller stopped waiting
	err      error
}

func (st *stmt) start(run func()) {
	st.done = make(chan struct{})
	go func() {
		defer close(st.done)
		run()
	}()
}

// finish marks the statement ended and reports whether the caller left.
// The mutex is held.
func (st *stmt) finish() bool {
	st.finished = true
	return st.late
}

// wait waits for the statement, or for ctx: then the statement is marked
// late (unless it just ended) and ctx's cause returned.
func (st *stmt) wait(ctx context.Context, mu *sync.Mutex) error {
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	if st.finished {
		return nil
	}
	st.late = true
	return context.Cause(ctx)
}

// stmtCtx is the context a statement on s runs under: ctx itself when no
// lease on s but self may still be valid (closing the connection, as pgx
// does when ctx ends mid-statement, frees nothing anyone counts on; inline
// is then true: the statement may run in the caller's goroutine), otherwise
// one that is not cancelled and ends at the latest of s's lease deadlines
// (and not before ctx's deadline). b.mu is held.
func (s *session) stmtCtx(ctx context.Context, self *lease) (qctx context.Context, cancel context.CancelFunc, inline bool) {
	now := time.Now()
	if !s.keepUntil.After(now) || s.othersExpired(self, now) {
		return ctx, func() {}, true
	}
	until := s.keepUntil
	if dl, ok := ctx.Deadline(); ok && dl.After(until) {
		until = dl
	}
	qctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), until)
	return qctx, cancel, false
}

// othersExpired reports whether every lease on s but self is past its
// deadline; on a session with many leases it does not look, and says no.
func (s *session) othersExpired(self *lease, now time.Time) bool {
	if len(s.leases) > 4 {
		return false
	}
	for _, l := range s.leases {
		if l != self && l.validUntil.After(now) {
			return false
		}
	}
	return true
}

// attach puts a granted lease on s. b.mu is held.
func (b *Backend) attach(s *session, l *lease) {
	s.leases[l.id] = l
	if l.validUntil.After(s.keepUntil) {
		s.keepUntil = l.validUntil
	}
	b.holding[l.id]++
}

// detach takes l off its session and out of the backend's books: its key,
// and its place on the session, are free at once. b.mu is held.
func (b *Backend) detach(l *lease) {
	l.dead = true
	lid := leaseID{l.key, l.token}
	if b.leases[lid] == l {
		delete(b.leases, lid)
	}
	if s := l.s; s != nil && s.leases[l.id] == l {
		delete(s.leases, l.id)
		if b.holding[l.id]--; b.holding[l.id] <= 0 {
			delete(b.holding, l.id)
		}
		if len(s.leases) == 0 && s.retiring {
			b.kill(s)
		}
	}
	if l.leave != nil {
		l.leave()
		l.leave = nil
	}
}

// kill ends s: every lease it carries is lost, and its connection is closed
// by whoever holds its op (now, when nobody does). b.mu is held.
func (b *Backend) kill(s *session) {
	if s.dead {
		return
	}
	s.dead = true
	close(s.gone)
	for _, l := range s.leases {
		b.detach(l)
	}
	b.unlist(s)
	if s.linger != nil {
		s.linger.Stop()
	}
	select {
	case s.op <- struct{}{}:
		go b.discard(s.conn) // nobody is using it; it never gives op back
	default:
		// The statement in flight closes it when it ends (endOp).
	}
}

// taint handles a statement error on s: a session that is gone, or whose
// connection pgx closed, is killed (its leases lost); one that lives but did
// something this backend cannot account for (an unlock whose outcome is
// unknown) takes no new lock and is closed when its last lease is gone.
// b.mu is held.
func (b *Backend) taint(s *session, err error) {
	switch {
	case s.dead:
	case sessionGone(err) || s.conn.Conn().IsClosed():
		b.kill(s)
	default:
		s.retiring = true
		if len(s.leases) == 0 {
			b.kill(s)
		}
	}
}

// endOp ends the statement of op's holder: a dead session's connection is
// closed (and op kept, so nobody uses it again).
func (b *Backend) endOp(s *session) {
	b.mu.Lock()
	dead := s.dead
	if !dead && len(s.leases) == 0 {
		b.lingerLocked(s)
	}
	b.mu.Unlock()
	if dead {
		b.discard(s.conn)
		return
	}
	<-s.op
}

// lingerLocked gives s back to the pool if it is still empty and unused
// after sessionLinger. b.mu is held.
func (b *Backend) lingerLocked(s *session) {
	if s.linger == nil {
		s.linger = time.AfterFunc(sessionLinger, func() { b.retire(s) })
		return
	}
	s.linger.Reset(sessionLinger)
}

// retire gives an empty, unused session back to the pool: its advisory
// locks dropped and its idle limit restored, or closed when that fails.
func (b *Backend) retire(s *session) {
	b.mu.Lock()
	ok := b.takeEmpty(s)
	b.mu.Unlock()
	if ok {
		b.restore(s.conn, s.prev)
	}
}

// takeEmpty takes s out of the set, with its connection, if it carries no
// lock and nothing is using or waiting for it. b.mu is held.
func (b *Backend) takeEmpty(s *session) bool {
	if s.dead || len(s.leases) > 0 || s.waiting > 0 || s.next != nil {
		return false
	}
	select {
	case s.op <- struct{}{}:
	default:
		return false // busy: a statement is on it
	}
	s.dead = true // to everyone else; its connection is the caller's now
	close(s.gone)
	b.unlist(s)
	if s.linger != nil {
		s.linger.Stop()
	}
	return true
}

// restore gives a connection of the backend back to the pool with no
// advisory lock and its settings as they were (prev), or closes it when
// that fails.
func (b *Backend) restore(conn *pgxpool.Conn, prev saved) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, sqlRetire, prev.idle, prev.stmt); err != nil {
		b.discard(conn)
		return
	}
	b.giveBack(conn)
}

// dropWaitLock gives back conn, a connection new to the backend whose wait
// for id failed with lock_timeout, once it has unlocked id if its session
// holds it (the lock may have been granted before the timeout); it closes
// conn when that fails, which frees the lock too.
func (b *Backend) dropWaitLock(conn *pgxpool.Conn, id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	classid, objid := lockIDs(id)
	if _, err := conn.Exec(ctx, sqlWaitUnlock, id, classid, objid); err != nil {
		b.discard(conn)
		return
	}
	b.giveBack(conn)
}

// waitConn is a connection to wait in PostgreSQL's queue on: an empty
// session's, taken out of the set (orig is then its settings as the pool
// gave it), else a new one (takeConn).
func (b *Backend) waitConn(ctx context.Context) (conn *pgxpool.Conn, orig *saved, err error) {
	b.mu.Lock()
	for _, s := range b.sessions {
		if b.takeEmpty(s) {
			b.mu.Unlock()
			return s.conn, &s.prev, nil
		}
	}
	b.mu.Unlock()
	conn, err = b.takeConn(ctx)
	return conn, nil, err
}

// unlist takes s out of the set. b.mu is held.
func (b *Backend) unlist(s *session) {
	for i, x := range b.sessions {
		if x == s {
			b.sessions = append(b.sessions[:i], b.sessions[i+1:]...)
			return
		}
	}
}

// pick returns a session of the set to run a statement on, with its op
// taken: a live session with no statement in flight (one whose idle limit
// is ttl first), else a new one while the set is under MaxHeld, else the
// one with the fewest statements waiting, once its op is free.
func (b *Backend) pick(ctx context.Context, id int64, ttl time.Duration) (*session, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, errClosed
		}
		var free, least *session
		for _, s := range b.sessions {
			if s.retiring || s.leases[id] != nil {
				continue
			}
			if len(s.op) == 0 && (free == nil || s.limit == ttl && free.limit != ttl) {
				free = s
			}
			if least == nil || s.waiting < least.waiting {
				least = s
			}
		}
		if free != nil {
			select {
			case free.op <- struct{}{}:
				b.mu.Unlock()
				return free, nil
			default:
			}
		}
		room := b.opening+len(b.sessions) < b.maxHeld && len(b.slots) < b.maxHeld
		if room && least != nil {
			st := b.pool.Stat()
			room = st.IdleConns() > 0 || st.TotalConns() < st.MaxConns()
		}
		if least == nil && !room && b.opening > 0 {
			// The first sessions are being opened: wait for one.
			ch := b.opened
			b.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("lockkit/pg: acquire: waiting for a session to open: %w", context.Cause(ctx))
			}
		}
		if least == nil || room {
			b.opening++
			b.mu.Unlock()
			s, err := b.open(ctx)
			b.mu.Lock()
			b.opening--
			close(b.opened)
			b.opened = make(chan struct{})
			any := len(b.sessions) > 0
			b.mu.Unlock()
			if err == nil {
				return s, nil
			}
			if !any || !errors.Is(err, ErrNoSession) {
				return nil, err
			}
			continue // lost a race for the last connection: use a session of the set
		}
		s := least
		s.waiting++
		b.mu.Unlock()
		var err error
		took := false
		select {
		case s.op <- struct{}{}:
			took = true
		case <-s.gone:
		case <-ctx.Done():
			err = fmt.Errorf("lockkit/pg: waiting for a session's earlier statements: %w", context.Cause(ctx))
		}
		b.mu.Lock()
		s.waiting--
		dead := s.dead
		b.mu.Unlock()
		switch {
		case took && !dead:
			return s, nil
		case took:
			b.endOp(s) // ended while we waited: we close it (see kill)
		case err != nil:
			return nil, err
		}
	}
}

// timeLeft is how long ctx has until its deadline; 0 when it has none.
func timeLeft(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 0
}

// refresh gives the statement that follows a wait for a connection (which
// is bounded by ConnWait, as set, and may take most of ctx's time, the
// command timeout, or outlast it) that time afresh when the wait took more
// than half of it; ctx's cancellation still ends it.
func refresh(ctx context.Context, budget time.Duration) (context.Context, func()) {
	if budget <= 0 || timeLeft(ctx) >= budget/2 || errors.Is(ctx.Err(), context.Canceled) {
		return ctx, func() {}
	}
	fresh, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	unhook := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	return fresh, func() { unhook(); cancel() }
}

// open takes a connection (a MaxHeld slot, then the pool) and makes it a
// session of the set, with its op taken.
func (b *Backend) open(ctx context.Context) (*session, error) {
	budget := timeLeft(ctx)
	conn, err := b.takeConn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, stop := refresh(ctx, budget)
	defer stop()
	var prev saved
	if err := conn.QueryRow(ctx, sqlSetting).Scan(&prev.idle, &prev.stmt, nil); err != nil {
		b.discard(conn)
		return nil, fmt.Errorf("lockkit/pg: acquire: read and set the session's timeouts: %w", err)
	}
	s := b.newSession(conn, prev, 0)
	s.op <- struct{}{}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		go b.discard(conn)
		return nil, errClosed
	}
	b.sessions = append(b.sessions, s)
	return s, nil
}

func (b *Backend) newSession(conn *pgxpool.Conn, prev saved, limit time.Duration) *session {
	return &session{conn: conn, prev: prev, limit: limit, op: make(chan struct{}, 1),
		gone: make(chan struct{}), leases: make(map[int64]*lease)}
}

// AcquireWait is Acquire that waits in PostgreSQL's own queue for the lock,
// at most maxWait (and never past ctx's deadline): pg_advisory_lock under a
// statement-local lock_timeout, on a connection of its own, which joins the
// backend's sessions with its lock when granted. Waiters are granted in
// arrival order, and a release wakes the next waiter at once, with no
// polling. It returns driver.ErrContended when the wait runs out, and
// waited: how long it kept the request before sending the statement (its
// line in process, the wait for a connection), plus how long after the
// server received the statement it granted the lock, on the server's clock.
// Within one backend, queued acquires of one
// key line up in process (in arrival order) and only the first waits in
// PostgreSQL (on a pool connection, counted in MaxHeld). Close ends the wait.
func (b *Backend) AcquireWait(ctx context.Context, req *driver.Request, maxWait time.Duration) (fence int64, waited time.Duration, err error) {
	if err := checkRequest(req); err != nil {
		return 0, 0, err
	}
	if maxWait < time.Millisecond {
		return 0, 0, fmt.Errorf("lockkit/pg: AcquireWait: maxWait %v is under a millisecond", maxWait)
	}
	// called: the caller's send is before it, so the time from it to the
	// statement's send (the line in process, the wait for a connection) is
	// added to waited: the lock is not held before the statement is sent.
	called := time.Now()
	lid, id := leaseID{req.Key, req.Token}, KeyID(req.Key)
	l := &lease{key: req.Key, token: req.Token, id: id, ttl: req.TTL}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, 0, errClosed
	}
	if _, dup := b.leases[lid]; dup {
		b.mu.Unlock()
		return 0, 0, driver.ErrContended
	}
	b.leases[lid] = l
	b.mu.Unlock()
	held := false
	defer func() {
		if !held {
			b.mu.Lock()
			if b.leases[lid] == l {
				delete(b.leases, lid)
			}
			b.mu.Unlock()
		}
	}()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(b.life, func() { stop(errClosed) })()

	deadline := time.Now().Add(maxWait)
	leave, err := b.enter(ctx, req.Key, maxWait)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if !held {
			leave()
		}
	}()
	conn, orig, err := b.waitConn(ctx)
	if err != nil {
		return 0, 0, err
	}
	// giveBack returns conn to the pool as the pool gave it.
	giveBack := func() {
		if orig == nil {
			b.giveBack(conn)
			return
		}
		b.restore(conn, *orig)
	}
	// The statement is sent again (at most maxWaitReruns times) when it
	// gave the lock back at the head of the queue with time left: its
	// lock-delay read uses the statement's snapshot, as old as its wait, so
	// a predecessor granted while it waited, whose session then ended
	// (terminated), left a record it could not see; the next statement's
	// snapshot sees it and sleeps on it (TestFIFOWaiterBehindTerminated).
	var (
		ok        bool
		prev      saved
		us        int64
		set       *string
		sent      time.Time
		returned  time.Time
		reruns    int
		firstIdle string
	)
	// restored gives conn back after a statement that left no lock: as the
	// pool gave it, or, after a first statement on a connection new to the
	// backend committed its settings, with them restored.
	restored := func() {
		if orig == nil && reruns > 0 {
			b.restore(conn, prev)
			return
		}
		giveBack()
	}
	for {
		wait := time.Until(deadline)
		if dl, ok := ctx.Deadline(); ok {
			// End the wait on the server before ctx ends it on the client
			// (which would close the connection), leaving a quarter of what
			// remains, at least 25ms and at most RoundTrip, for the round trip.
			left := time.Until(dl)
			keep := max(left/4, 25*time.Millisecond)
			if b.roundTrip > 0 {
				keep = min(keep, max(b.roundTrip, 25*time.Millisecond))
			}
			wait = min(wait, left-keep)
		}
		if wait < time.Millisecond {
			restored()
			if reruns > 0 || time.Until(deadline) < time.Millisecond {
				return 0, 0, driver.ErrContended // as the statement before answered
			}
			return 0, 0, fmt.Errorf("lockkit/pg: AcquireWait: ctx leaves no time to wait: %w", context.DeadlineExceeded)
		}
		query, args := sqlWait, []any{id, ttlString(req.TTL), msString(wait), req.Token, ttlMs(req.TTL)}
		if req.Fencing {
			query, args = fenceQuery(req.Key, sqlWaitFence, sqlWaitFenceLong, []any{id, ttlString(req.TTL), req.Key, msString(wait), req.Token, ttlMs(req.TTL)})
		}
		scan := func(r pgx.Row) error { return r.Scan(&ok, &prev.idle, &fence, &us, &set) }
		sent = time.Now()
		if orig != nil || reruns > 0 {
			// A session of the backend's, or a connection whose first
			// statement committed statement_timeout 0.
			err = scan(conn.QueryRow(ctx, query, args...))
		} else {
			// A connection new to the backend: statement_timeout goes to 0
			// first, in the same round trip, so the wait (a statement of its
			// own, whose timer starts as it arrives) runs without it. Both run
			// in one implicit transaction: a wait that fails takes the setting
			// back with it.
			var batch pgx.Batch
			batch.Queue(sqlNoStmtTimeout).QueryRow(func(r pgx.Row) error { return r.Scan(&prev.stmt, nil) })
			batch.Queue(query, args...).QueryRow(scan)
			err = conn.SendBatch(ctx, &batch).Close()
		}
		returned = time.Now()
		if reruns == 0 {
			firstIdle = prev.idle
		} else {
			// The idle limit the first statement found, not the one it set.
			prev.idle = firstIdle
		}
		if err == nil && !ok && reruns < maxWaitReruns && time.Until(deadline) >= time.Millisecond && ctx.Err() == nil {
			reruns++
			continue
		}
		break
	}
	switch {
	case err == nil && ok:
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed || b.leases[lid] != l {
			go b.discard(conn)
			return 0, 0, errClosed
		}
		if orig != nil {
			prev = *orig
		}
		s := b.newSession(conn, prev, req.TTL)
		b.sessions = append(b.sessions, s)
		l.s, l.validUntil, l.leave = s, returned.Add(req.TTL), leave
		b.attach(s, l)
		held = true
		return fence, sent.Sub(called) + time.Duration(us)*time.Microsecond, nil
	case err == nil:
		if orig == nil {
			// The batch committed statement_timeout 0.
			b.restore(conn, prev)
		} else {
			giveBack()
		}
		return 0, 0, driver.ErrContended
	case sqlState(err) == "55P03":
		// lock_timeout ran out: in the queue, or after the lock was
		// granted, on a row the statement then had to lock (the lease
		// record, read by the lock-delay or written, or the fence row).
		// Either way the statement was aborted, its record, fence and
		// settings rolled back, but a session lock outlives its
		// transaction: it is dropped before the connection goes back
		// (restore drops every lock of a session of the backend's), or
		// the connection is closed.
		switch {
		case orig == nil && reruns == 0:
			b.dropWaitLock(conn, id)
		default:
			restored() // drops every lock of the session
		}
		return 0, 0, driver.ErrContended
	}
	// The lock may have been taken before the statement failed (a session
	// lock outlives its aborted transaction): close the session, which
	// frees it. Its record may be committed all the same (abandonLocked).
	b.mu.Lock()
	b.abandonLocked(lid, conn.Conn().PgConn().PID(), req.TTL)
	b.mu.Unlock()
	b.discard(conn)
	if errors.Is(context.Cause(ctx), errClosed) {
		return 0, 0, errClosed
	}
	return 0, 0, fmt.Errorf("lockkit/pg: acquire: %w", wrapTableErr(err))
}

// maxWaitReruns bounds how many times AcquireWait sends its statement again
// after one that gave the lock back at the head with time left.
const maxWaitReruns = 3

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
	// leave runs with or without b.mu held: it takes it only in a
	// goroutine of its own.
	return func() {
		once.Do(func() {
			<-g.ch
			go drop()
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
			return nil, fmt.Errorf("%w within %v: this backend already has %d connections out, its limit "+
				"(Options.MaxHeld; the pool has MaxConns %d), all of them waiting in PostgreSQL's lock queue: raise MaxHeld, or give locks a pool of their own",
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

// Extend checks that key's lock is still held by its session, and raises
// the session's idle limit to ttl if it is lower. The check is shared: it
// joins the session's next check, one statement sent after this call that
// lists every lock the session holds. held is false (nil error) when the
// session is gone (pg_terminate_backend, the idle limit, a restart, a
// connection closed here) or no longer lists the lock; the lease's key and
// place are released at once then. An error means it cannot tell: no answer
// within ctx (the statement goes on, and the session keeps its locks: see
// the package doc).
func (b *Backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if err := checkKeyTTL(key, ttl); err != nil {
		return false, err
	}
	b.mu.Lock()
	l := b.leases[leaseID{key, token}]
	if l == nil || l.s == nil || l.dead {
		b.mu.Unlock()
		return false, nil
	}
	s := l.s
	l.ttl = ttl
	r := s.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		s.next = r
		go b.check(s, r)
	}
	r.ttl = max(r.ttl, ttl)
	r.asked = append(r.asked, l)
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return false, fmt.Errorf("lockkit/pg: extend: no answer within the command timeout (the session is kept, with its locks): %w", context.Cause(ctx))
	}
	if r.err != nil {
		return false, fmt.Errorf("lockkit/pg: extend: %w", r.err)
	}
	b.mu.Lock()
	held := !l.dead
	b.mu.Unlock()
	return held, nil
}

// check runs round r on s: one statement that lists the advisory locks the
// session holds (raising its idle limit when a member asked for more), and
// moves forward the records of the leases that asked (r.asked). Every lease
// that asked, whose lock is listed and whose record was still its own, is
// renewed from the statement's send; every lease on s whose lock is not
// listed (or, having asked, whose record was not its own) is lost. A lease
// that did not ask keeps its bounds: its record was not moved, and its own
// Extend will ask (on a session carrying thousands of leases, moving every
// record at every round cost a row write per lease per round, and rounds
// come back to back: the renewals fell behind on a loaded machine).
func (b *Backend) check(s *session, r *round) {
	defer close(r.done)
	select {
	case s.op <- struct{}{}:
	case <-s.gone:
		return // its leases were detached: held = false
	}
	b.mu.Lock()
	if s.dead {
		b.mu.Unlock()
		b.endOp(s)
		return
	}
	s.next = nil
	limit := ""
	if r.ttl > s.limit {
		limit = ttlString(r.ttl)
	}
	sent := time.Now()
	var qctx context.Context
	var cancel context.CancelFunc
	if s.keepUntil.After(sent) {
		qctx, cancel = context.WithDeadline(context.Background(), s.keepUntil)
	} else {
		// No lease on s is valid on the Client any more: closing the
		// connection is safe, and the check is bounded by a ttl.
		qctx, cancel = context.WithTimeout(context.Background(), r.ttl)
	}
	// The leases that asked and are still on s, each once: only their
	// records move.
	asked := make(map[int64]*lease, len(r.asked))
	ids := make([]int64, 0, len(r.asked))
	tokens := make([]string, 0, len(r.asked))
	ttls := make([]int64, 0, len(r.asked))
	for _, l := range r.asked {
		if l.dead || l.releasing || s.leases[l.id] != l || asked[l.id] != nil {
			continue // lost, released, or its unlock follows this check
		}
		asked[l.id] = l
		ids, tokens, ttls = append(ids, l.id), append(tokens, l.token), append(ttls, ttlMs(l.ttl))
	}
	b.mu.Unlock()
	var (
		renewed, locked []int64
		set             *string
	)
	err := s.conn.QueryRow(qctx, sqlCheck, limit, ids, tokens, ttls).Scan(&renewed, &locked, &set)
	cancel()
	b.mu.Lock()
	switch {
	case err == nil:
		if limit != "" {
			s.limit = r.ttl
		}
		held := make(map[int64]bool, len(locked))
		for _, id := range locked {
			held[id] = true
		}
		moved := make(map[int64]bool, len(renewed))
		for _, id := range renewed {
			moved[id] = true
		}
		for id, l := range s.leases {
			if l.releasing {
				continue
			}
			switch {
			case asked[id] != l && !held[id], asked[id] == l && !moved[id]:
				b.detach(l) // its lock, or (having asked) its record, is gone
			case asked[id] == l:
				if v := sent.Add(l.ttl); v.After(l.validUntil) {
					l.validUntil = v
				}
				if l.validUntil.After(s.keepUntil) {
					s.keepUntil = l.validUntil
				}
			}
		}
	case sessionGone(err) || s.conn.Conn().IsClosed():
		// Gone, or closed past every lease's deadline.
		b.kill(s)
	default:
		r.err = err
	}
	b.mu.Unlock()
	b.endOp(s)
}

// Release unlocks key on its lease's session. The lease is released on the
// backend when the unlock ends, or at once when it is gone; when the
// session is busy with another statement until ctx ends, the unlock is sent
// once that statement ends (unlockLater); when the unlock's outcome is
// unknown, the session takes no new lock and is closed (freeing the lock)
// when its last lease is gone.
//
// A token the backend holds no lease for (lost, released already, or
// granted to nobody: an acquire whose caller gave up, run by the server
// after its connection was closed, which freed the lock with the session)
// may still have a lease record that keeps other holders out until its
// expiry (lock-delay). The caller gives the token up, so Release deletes
// that record; held is false all the same (the token held no lock here:
// a lost lease's release still reports the loss). An acquire of token
// still in flight in this backend is left to finish: it unlocks a grant
// nobody waits for itself.
func (b *Backend) Release(ctx context.Context, key, token string) (bool, error) {
	if key == "" {
		return false, errors.New("lockkit/pg: empty lock key")
	}
	b.mu.Lock()
	l := b.leases[leaseID{key, token}]
	if l != nil && l.s == nil && !l.dead {
		b.mu.Unlock()
		return false, nil // still being acquired
	}
	if l == nil || l.dead {
		ab, unsure := b.abandoned[leaseID{key, token}]
		b.mu.Unlock()
		if unsure {
			return false, b.dropAbandoned(ctx, key, token, ab)
		}
		return false, b.dropRecord(ctx, key, token)
	}
	s := l.s
	s.waiting++
	b.mu.Unlock()
	var werr error
	took := false
	select {
	case s.op <- struct{}{}:
		took = true
	case <-s.gone:
	case <-ctx.Done():
		werr = context.Cause(ctx)
	}
	b.mu.Lock()
	s.waiting--
	if s.dead || l.dead {
		b.mu.Unlock()
		if took {
			b.endOp(s)
		}
		if werr != nil {
			return false, nil // lost meanwhile; ctx leaves no time for its record
		}
		return false, b.dropRecord(ctx, key, token)
	}
	if werr != nil {
		// Released on the Client now; the unlock is sent once the
		// session's statement in flight ends (unlockLater). Until then
		// the lock id stays on s (no lock of it is taken here again) and
		// out of s's checks.
		l.releasing, l.validUntil = true, time.Time{}
		if lid := (leaseID{l.key, l.token}); b.leases[lid] == l {
			delete(b.leases, lid)
		}
		s.waiting++
		b.mu.Unlock()
		go b.unlockLater(s, l)
		return false, fmt.Errorf("lockkit/pg: release: the session was busy until ctx ended; the unlock is sent when its statement ends: %w", werr)
	}
	qctx, cancel, inline := s.stmtCtx(ctx, l)
	b.mu.Unlock()
	var (
		held bool
		st   stmt
	)
	run := func() {
		err := s.conn.QueryRow(qctx, sqlUnlock, l.id, l.token).Scan(&held, nil)
		cancel()
		b.mu.Lock()
		st.finish()
		st.err = err
		switch {
		case err != nil && (sessionGone(err) || s.conn.Conn().IsClosed()):
			b.kill(s)
		case err != nil:
			b.detach(l)
			b.taint(s, err)
		default:
			b.detach(l)
		}
		b.mu.Unlock()
		b.endOp(s)
	}
	if inline {
		run()
	} else {
		st.start(run)
		if err := st.wait(ctx, &b.mu); err != nil {
			return false, fmt.Errorf("lockkit/pg: release: no answer within ctx (the unlock goes on): %w", err)
		}
	}
	switch {
	case st.err != nil && sessionGone(st.err):
		return false, nil
	case st.err != nil:
		return false, fmt.Errorf("lockkit/pg: release: %w (the session is closed, which frees the lock, once its other locks are released)", st.err)
	}
	return held, nil
}

// unlockLater is the unlock of a lease whose release gave up waiting for
// its session (Release): it waits for the session's statement in flight,
// then unlocks the lease's lock and deletes its record, owner-checked, as
// Release would have. s.waiting counts it until then.
func (b *Backend) unlockLater(s *session, l *lease) {
	took := false
	select {
	case s.op <- struct{}{}:
		took = true
	case <-s.gone:
	}
	b.mu.Lock()
	s.waiting--
	if !took || s.dead {
		b.detach(l)
		b.mu.Unlock()
		if took {
			b.endOp(s)
		}
		return
	}
	b.mu.Unlock()
	err := b.unlockOn(s, l.id, l.token)
	b.mu.Lock()
	b.detach(l)
	if err != nil {
		b.taint(s, err)
	}
	b.mu.Unlock()
	b.endOp(s)
}

// unlockOn sends id's owner-checked unlock (sqlUnlock) for token on s, whose
// op the caller holds, within a second, or until the latest deadline of
// s's leases when one is still valid (stmtCtx). b.mu is not held.
func (b *Backend) unlockOn(s *session, id int64, token string) error {
	uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
	defer ucancel()
	b.mu.Lock()
	qctx, qcancel, _ := s.stmtCtx(uctx, nil)
	b.mu.Unlock()
	defer qcancel()
	_, err := s.conn.Exec(qctx, sqlUnlock, id, token)
	return err
}

// abandonLocked notes that the acquire of lid ran on the server process pid
// whose connection was closed mid-statement, so its outcome is unknown: the
// server may run it to the end after the close, taking the lock (freed when
// the process sees the close and exits) and committing the lease record,
// which keeps other holders out for ttl. Release of the token waits for
// that process to end, then deletes the record (dropAbandoned). Entries
// past their ttl are purged here. b.mu is held.
func (b *Backend) abandonLocked(lid leaseID, pid uint32, ttl time.Duration) {
	now := time.Now()
	for k, a := range b.abandoned {
		if now.After(a.until) {
			delete(b.abandoned, k)
		}
	}
	if pid != 0 {
		b.abandoned[lid] = abandonedAcquire{pid: pid, until: now.Add(ttl)}
	}
}

// dropAbandoned is Release of an abandoned acquire's token (abandonLocked):
// an error while the server process that may still run the statement is
// alive (its outcome is not known yet: the Client's give-back asks again),
// otherwise the record is deleted, as it is final now: a backend leaves
// pg_stat_activity in an on_shmem_exit hook (pgstat_beshutdown_hook), which
// runs after ShutdownPostgres (a before_shmem_exit hook) has ended its
// transaction. After the record's latest expiry there is nothing left to do.
func (b *Backend) dropAbandoned(ctx context.Context, key, token string, ab abandonedAcquire) error {
	lid := leaseID{key, token}
	if time.Now().Before(ab.until) {
		var alive bool
		if err := b.pool.QueryRow(ctx, sqlProcessAlive, int64(ab.pid)).Scan(&alive); err != nil {
			return fmt.Errorf("lockkit/pg: release: is the server process of an abandoned acquire (pid %d) still running: %w", ab.pid, err)
		}
		if alive {
			return fmt.Errorf("lockkit/pg: release: the acquire's connection was closed mid-statement, and its server process (pid %d) is still running: its outcome is not known yet", ab.pid)
		}
		if err := b.dropRecord(ctx, key, token); err != nil {
			return err
		}
	}
	b.mu.Lock()
	if b.abandoned[lid] == ab {
		delete(b.abandoned, lid)
	}
	b.mu.Unlock()
	return nil
}

// dropRecord deletes token's lease record of key, if it is still there,
// over a pool connection: no lease of the backend holds the lock, so there
// is no lock to give back with it.
func (b *Backend) dropRecord(ctx context.Context, key, token string) error {
	if _, err := b.pool.Exec(ctx, sqlDropRecord, KeyID(key), token); err != nil {
		return fmt.Errorf("lockkit/pg: release: delete the lease record of a token that holds no lock here: %w", wrapTableErr(err))
	}
	return nil
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

// Close closes the backend's sessions, which frees their locks (a session
// with a statement in flight is closed when it ends), ends the waits in
// PostgreSQL's queue, and makes later acquires fail. It does not close the
// pool.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	for len(b.sessions) > 0 {
		b.kill(b.sessions[0])
	}
	for _, l := range b.leases {
		b.detach(l)
	}
	b.mu.Unlock()
	b.stopLife()
	return nil
}

// Held is how many leases the backend holds now (granted and not yet
// released or found lost).
func (b *Backend) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.holding {
		n += c
	}
	return n
}

// Sessions is how many connections carry the backend's locks now.
func (b *Backend) Sessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
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
// from the fence table; waiting in PostgreSQL's own queue (driver.Waiter);
// no push queue or batching.
func (b *Backend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "postgres", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond, Fences: true, ServerQueue: true, Holders: true}
}

// ReadHolder reads, in one statement, whether any session holds key's
// advisory lock (pg_locks) under an unexpired lease record, and key's last
// fence (the fence table): the holder's, as the grant issues it in the
// statement that takes the lock. PostgreSQL keeps neither the token nor a
// description of the holder, so both are "". A grant whose statement has
// not committed yet shows nobody for a moment. A holder whose session
// ended is shown until its record expires (the lock-delay, during which
// nobody else is granted), when a waiter holds the lock while it waits it
// out.
func (b *Backend) ReadHolder(ctx context.Context, key string) (driver.Holding, bool, error) {
	if err := checkKeyTTL(key, time.Millisecond); err != nil {
		return driver.Holding{}, false, err
	}
	id := KeyID(key)
	classid, objid := lockIDs(id)
	long := key
	if len(key) > FenceKeyMax {
		long = FenceRowKey(key)
	}
	var (
		held  bool
		fence int64
	)
	err := b.pool.QueryRow(ctx, sqlHolder, int64(classid), int64(objid), key, long, id).Scan(&held, &fence)
	if err != nil {
		return driver.Holding{}, false, fmt.Errorf("lockkit/pg: read holder: %w", wrapTableErr(err))
	}
	if !held {
		return driver.Holding{}, false, nil
	}
	return driver.Holding{Fence: fence}, true, nil
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
