package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
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
// matching lockkit.ErrLockLost when the lease's deadline passed (or the
// client closed) before the commit (the work was rolled back), or the
// commit's error. The transaction's lock is not renewed by statements of its
// own (pgx runs one statement at a time on a transaction, and fn owns it);
// the lease's deadline is extended every renew interval while the
// transaction lives, and the commit is what proves that the lock was held.
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
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: postgres.DoTx %s: begin: %w", lockkit.ErrUnavailable, lock.Key(), err)
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()
	tb := &txBackend{tx: tx}
	return lockkit.DoOn(ctx, lock, tb, func(fctx context.Context, lease *lockkit.Lease) error {
		if err := fn(fctx, tx, lease); err != nil {
			return err
		}
		if lease.Err() != nil {
			return errRolledBack // Do joins the loss
		}
		if err := tx.Commit(fctx); err != nil {
			return fmt.Errorf("lockkit: postgres.DoTx %s: commit: %w", lock.Key(), err)
		}
		committed = true
		return nil
	})
}

var errRolledBack = errors.New("lockkit: postgres.DoTx: the lease was not valid when fn returned; the transaction was rolled back")

// txBackend holds one lock for the length of tx.
type txBackend struct {
	tx     pgx.Tx
	broken error // the error that aborted tx
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
	return fence, err
}

// Extend sends nothing (fn owns tx, which runs one statement at a time): the
// lock lives as long as the transaction, and the commit says whether it did.
func (b *txBackend) Extend(ctx context.Context, _, _ string, _ time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return true, nil
}

// Release does nothing: the transaction's end releases the lock.
func (b *txBackend) Release(context.Context, string, string) (bool, error) { return true, nil }

func (b *txBackend) Ping(ctx context.Context) error { return nil }
func (b *txBackend) Close() error                   { return nil }

// Capabilities: the transaction's lock, fenced from the fence table.
func (b *txBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "postgres(tx)", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond, Fences: true}
}
