// Package postgres puts lockkit's locks in PostgreSQL: session advisory locks
// held for the lease, with a server-side idle limit derived from the TTL (the
// TTL equivalent), fences from a durable table, and transaction-scoped locks
// that commit or roll back with the work (DoTx).
//
//	client, err := lockkit.New(postgres.New(pool, opts...))
//
// It lives in its own package so that programs on Redis do not link pgx:
// package lockkit does not import it.
//
// How a lease holds its lock: the client keeps a few connections of pool
// checked out (at most WithMaxHeld), whose sessions each own any number of
// pg_advisory_lock(id)s and have idle_session_timeout set to the longest TTL
// among them. The Client's renewals (every renew interval, < TTL) are one
// check per session of the locks it holds; a holder that stops (paused
// process, cut network) stops renewing, the server ends its sessions after
// the TTL and frees their locks, and the holder's own deadlines pass first,
// so fn's ctx is cancelled with lockkit.ErrLockLost. A session ended under a
// holder (pg_terminate_backend, a server restart) is found by the next
// renewal: exactly the leases it carried are lost. Until then nobody else is
// granted those locks: each lease has a durable record in lockkit_leases
// (its expiry on the server's clock), and a grant over an unexpired record
// is refused (lock-delay); a release deletes it, so a clean handover waits
// for nothing.
//
// Domains with wait: fifo wait in PostgreSQL's own lock queue
// (pg_advisory_lock), in arrival order, bounded by max_wait and ctx.
//
// Held locks share at most half of the pool's connections by default
// (WithMaxHeld). An acquire that has no session to use and finds no free
// connection within WithConnWait fails with an error matching
// lockkit.ErrUnavailable that says so, never a hang; it does not trip the
// circuit breaker (the server is fine). Each held lock takes an entry in the
// server's shared lock table (about max_locks_per_transaction ×
// max_connections entries in all): raise max_locks_per_transaction to hold
// more than a few thousand at once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
)

// ErrNoSession is matched by an acquire that found no free connection to hold
// the lock on (alongside lockkit.ErrUnavailable).
var ErrNoSession = pgbackend.ErrNoSession

// Option tunes the PostgreSQL backend.
type Option struct{ set func(*pgbackend.Options) }

// WithMaxHeld caps the connections locks take from the pool at once:
// sessions that carry any number of held locks each, and connections that
// wait in PostgreSQL's queue for a wait: fifo domain. Default: half of the
// pool's MaxConns, at least 1. More sessions let more acquires and renewals
// run at once; give the backend a pool of its own and set this to its
// MaxConns to let locks use all of it.
func WithMaxHeld(n int) Option { return Option{func(o *pgbackend.Options) { o.MaxHeld = n }} }

// WithConnWait bounds how long an acquire that has no session to use waits
// for a connection before it fails with ErrNoSession. Default 500ms.
func WithConnWait(d time.Duration) Option {
	return Option{func(o *pgbackend.Options) { o.ConnWait = d }}
}

// New is the PostgreSQL backend over pool, for lockkit.New. The Client
// never closes pool; Client.Close closes the sessions of the locks it still
// holds, which frees them.
func New(pool *pgxpool.Pool, opts ...Option) driver.Spec {
	var o pgbackend.Options
	for _, opt := range opts {
		if opt.set != nil {
			opt.set(&o)
		}
	}
	spec := driver.Spec{Name: "postgres"}
	if pool == nil {
		spec.Err = errors.New("lockkit: postgres.New: nil pool")
	} else {
		spec.Open = func(dc driver.Config) (driver.Backend, error) {
			o := o
			o.RoundTrip = dc.CommandTimeout
			b, err := pgbackend.New(pool, o)
			if err != nil {
				return nil, err
			}
			cfg := pool.Config().ConnConfig
			return pgBackend{Backend: b, name: fmt.Sprintf("postgres(%s:%d/%s)", cfg.Host, cfg.Port, cfg.Database)}, nil
		}
	}
	return spec
}

// pgBackend adds what the Client asks of a backend besides I/O: its
// capabilities, and the classification of its acquisitions' errors.
type pgBackend struct {
	*pgbackend.Backend
	name string
}

// Capabilities are pgbackend's, named after the server.
func (b pgBackend) Capabilities() driver.Capabilities {
	c := b.Backend.Capabilities()
	c.Name = b.name
	return c
}

// Acquire marks its errors for the Client's breaker (classify).
func (b pgBackend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	fence, err := b.Backend.Acquire(ctx, req)
	return fence, classify(err)
}

// AcquireWait marks its errors for the Client's breaker (classify).
func (b pgBackend) AcquireWait(ctx context.Context, req *driver.Request, maxWait time.Duration) (int64, time.Duration, error) {
	fence, waited, err := b.Backend.AcquireWait(ctx, req, maxWait)
	return fence, waited, classify(err)
}

// classify marks no free connection as capacity, and a connection exception
// (SQLSTATE class 08) or a server shutting down or starting up (57P01
// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now) as a
// failure: the server cannot serve locks now, and the breaker counts it.
// Network errors the breaker recognises by itself.
func classify(err error) error {
	if err == nil || errors.Is(err, driver.ErrContended) {
		return err
	}
	if errors.Is(err, pgbackend.ErrNoSession) {
		return driver.Capacity(err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03") {
		return driver.Failure(err)
	}
	return err
}

// Execer runs a statement: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MigrationSQL creates the tables every domain needs: lockkit_fences (the
// fences) and lockkit_leases (the lease records). Migrate runs it; a schema
// migration tool can run it instead.
const MigrationSQL = pgbackend.MigrationSQL

// Migrate creates the fence and lease tables if they do not exist. Run it
// once, explicitly, before the first acquire: lockkit never creates tables
// at run time, and an acquire without them fails with an error that names
// Migrate. db is a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
func Migrate(ctx context.Context, db Execer) error {
	return pgbackend.Migrate(ctx, db)
}

// KeyID is the advisory lock id a key is locked under (pg_locks: classid =
// KeyID>>32, objid = KeyID&0xffffffff).
func KeyID(key string) int64 { return pgbackend.KeyID(key) }

// FenceRowKey is the lockkit_fences key under which the fence of a lock key
// too long for a btree row is kept (docs/wire.md); shorter keys, and long
// keys that already have a row of their own, use the key itself.
func FenceRowKey(key string) string { return pgbackend.FenceRowKey(key) }
