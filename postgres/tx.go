package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/lockhook"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/lockkit"
)

// DoTx runs fn inside a transaction of pool that holds lock with
// pg_try_advisory_xact_lock, so that the lock and fn's work commit or roll
// back together: the lock is released when the transaction ends, either way.
// lock is any lockkit.Lock (a generated helper's, too: the generated code
// does not change); its domain's policy applies: acquisition retries per its
// Retry policy (contention is lockkit.ErrNotAcquired), a fencing domain's
// fence is issued in the same statement as the grant, and the TTL becomes
// the transaction's idle_in_transaction_session_timeout: a holder that stops
// between statements for longer loses its session, its lock and its work.
//
// DoTx commits when fn returns nil and the lease is still valid on the
// client's clock, and rolls back otherwise. It returns fn's error, an error
// matching lockkit.ErrLockLost when the lease's deadline passed before the
// commit was sent (the work was rolled back), an
// error matching ErrCommitUnknown when the commit was sent and its outcome
// cannot be known (the connection died before the answer), or the commit's
// error (it rolled back: one the server answered with, or pgx's
// ErrTxCommitRollback when a statement of fn's had aborted the transaction). Once sent, the commit is never cancelled, by fn's
// ctx, the lease's loss or Close: the transaction's lock is held until the
// commit ends, so a commit that succeeds proves the lock was held throughout,
// and DoTx then returns nil even if the lease's deadline passed while the
// commit waited (for a synchronous standby, for one).
//
// Client.Close while fn runs cancels fn's ctx with a cause matching
// lockkit.ErrClosed but does not end the lease (it is still renewed): a fn
// that returns nil then commits as usual and DoTx returns nil, and Close
// waits for the commit within its own ctx. If Close's ctx ends first, Close
// returns and the sent commit still runs to its end; the lease, no longer
// renewed, ends at its deadline, so a commit not yet sent by then rolls back
// (lockkit.ErrLockLost).
//
// The transaction's connection is taken from pool within
// pgbackend.DefaultConnWait; an exhausted pool is an error matching
// lockkit.ErrUnavailable and ErrNoSession. Every statement DoTx sends on the
// lock's behalf (BEGIN, the acquire and the write of the lease's record, the
// rollback) is bounded by the Client's command timeout
// (lockkit.WithCommandTimeout) as well as by ctx: on a stalled server, or
// behind a row that another transaction holds, DoTx returns an error
// matching lockkit.ErrUnavailable within a few command timeouts, without
// calling fn. A statement cut short closes its connection, which ends the
// transaction: nothing is held once its server process notices (a stalled
// server when it wakes, a statement waiting on a row when that wait ends).
// fn and the commit are not bounded by the command timeout.
//
// While the transaction lives its lease is renewed every renew interval by
// a check over another connection of pool: its session still holds the
// lock, and has not sat idle in the transaction for longer than the TTL.
// The server ends a transaction idle for twice the TTL
// (idle_in_transaction_session_timeout), so a holder that stops between
// statements loses its lease after about one TTL, its session (and its lock
// and work) after two: the lease always ends first.
//
// The fence is valid inside this transaction only: a rolled-back
// transaction's fence may be issued again, so use it for writes made with tx
// (fence.Table with tx as its Execer), not to mark writes elsewhere.
// Within one transaction the lock is re-entrant.
func DoTx(ctx context.Context, pool *pgxpool.Pool, lock lockkit.Lock, fn func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error) error {
	if pool == nil {
		return errors.New("lockkit: postgres.DoTx: nil pool")
	}
	if fn == nil {
		return errors.New("lockkit: postgres.DoTx: nil fn")
	}
	if lock.Key() == "" {
		return lockkit.ErrNoClient
	}
	cctx, cancel := context.WithTimeout(ctx, pgbackend.DefaultConnWait)
	conn, err := pool.Acquire(cctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			st := pool.Stat()
			return fmt.Errorf("%w: postgres.DoTx %s: %w within %v (%d of the pool's MaxConns %d in use)", lockkit.ErrUnavailable,
				lock.Key(), pgbackend.ErrNoSession, pgbackend.DefaultConnWait, st.AcquiredConns(), st.MaxConns())
		}
		return fmt.Errorf("%w: postgres.DoTx %s: connection: %w", lockkit.ErrUnavailable, lock.Key(), err)
	}
	// Every statement sent on the lock's behalf is bounded by the command
	// timeout, as well as by ctx (guarantee 7): BEGIN and the rollback here,
	// each acquire (AcquireTx and TxLease) by DoOn. One cut short closes
	// its connection (pgx), which ends the transaction; Release then drops
	// the connection rather than pooling it.
	cmd := lockhook.CommandTimeout(lock)
	bctx, cancel := context.WithTimeout(ctx, cmd)
	tx, err := conn.Begin(bctx)
	cancel()
	if err != nil {
		conn.Release()
		return fmt.Errorf("%w: postgres.DoTx %s: begin: %w", lockkit.ErrUnavailable, lock.Key(), err)
	}
	committed := false
	defer func() {
		if !committed {
			// Not cancelled with ctx: the rollback frees the lock now.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmd)
			_ = tx.Rollback(rctx) // a failed rollback closes the connection
			cancel()
		}
		conn.Release()
	}()
	tb := &txBackend{tx: tx, pool: pool, pid: conn.Conn().PgConn().PID()}
	var commitErr error
	err = lockkit.DoOn(ctx, lock, tb, func(fctx context.Context, lease *lockkit.Lease) error {
		if err := fn(fctx, tx, lease); err != nil {
			return err
		}
		if lease.Err() != nil {
			return errRolledBack // Do joins the loss
		}
		// Sent now: nothing may cancel it (the server may commit anyway).
		if err := tx.Commit(context.WithoutCancel(fctx)); err != nil {
			commitErr = commitError(lock.Key(), err)
			return commitErr
		}
		committed = true
		return nil
	})
	switch {
	case committed:
		return nil // the commit proves the lock was held until it
	case commitErr != nil:
		return commitErr
	}
	return err
}

// ErrCommitUnknown is matched by DoTx's error when its commit was sent and
// its outcome cannot be known: the connection failed before the answer came.
// The transaction may have committed or not; look at the data.
var ErrCommitUnknown = errors.New("lockkit: postgres.DoTx: the commit's outcome is unknown")

// commitError says whether a failed commit rolled back (the server
// answered with an error) or may have committed (no answer).
func commitError(key string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Severity == "ERROR" || errors.Is(err, pgx.ErrTxCommitRollback) {
		// The server answered: it rolled back (a failed statement in fn
		// aborted the transaction: pgx's ErrTxCommitRollback).
		return fmt.Errorf("lockkit: postgres.DoTx %s: commit: %w (rolled back)", key, err)
	}
	return fmt.Errorf("%w: postgres.DoTx %s: commit: %w", ErrCommitUnknown, key, err)
}

var errRolledBack = errors.New("lockkit: postgres.DoTx: the lease was not valid when fn returned; the transaction was rolled back")

// txBackend holds one lock for the length of tx.
type txBackend struct {
	tx     pgx.Tx
	pool   *pgxpool.Pool
	pid    uint32 // tx's server process
	broken error  // the error that aborted tx
}

func (b *txBackend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	if b.broken != nil {
		return 0, b.broken
	}
	fence, err := pgbackend.AcquireTx(ctx, b.tx, req.Key, req.TTL, req.Fencing)
	if err != nil && !errors.Is(err, driver.ErrContended) {
		// Any other error aborted the transaction: no retry can succeed.
		b.broken = fmt.Errorf("%w (the transaction is aborted: %w)", err, driver.ErrFinal)
		return 0, b.broken
	}
	if err != nil {
		return 0, err
	}
	// The lease's record, over another connection: a record in tx would
	// vanish with it (pg_terminate_backend, a crash), freeing the lock with
	// nothing to delay the next holder. Until it is written the lease is
	// not granted. An error leaves tx usable: a retry takes the lock again
	// (re-entrant) and writes the record.
	held, err := pgbackend.TxLease(ctx, b.pool, b.pid, req.Key, req.Token, req.TTL)
	switch {
	case err != nil:
		return 0, err
	case !held:
		return 0, driver.ErrContended
	}
	return fence, nil
}

// Extend checks over another connection of the pool (fn owns tx, which runs
// one statement at a time) that tx's session still holds the lock and has
// not sat idle too long, and moves the lease's record forward
// (pgbackend.TxLease).
func (b *txBackend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return pgbackend.TxLease(ctx, b.pool, b.pid, key, token, ttl)
}

// Release drops the lease's record: the transaction's end (its commit, or
// the rollback after Do) releases the lock itself.
func (b *txBackend) Release(ctx context.Context, key, token string) (bool, error) {
	if err := pgbackend.TxDrop(ctx, b.pool, key, token); err != nil {
		return true, err
	}
	return true, nil
}

func (b *txBackend) Ping(ctx context.Context) error { return nil }
func (b *txBackend) Close() error                   { return nil }

// Capabilities: the transaction's lock, fenced from the fence table.
func (b *txBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "postgres(tx)", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond, Fences: true}
}
