package pgbackend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockkit/lockkit/driver"
)

// AcquireTx takes key for the rest of tx with pg_try_advisory_xact_lock, in
// one statement that also issues the fence (when fencing) and sets tx's
// idle_in_transaction_session_timeout to ttl, locally. The lock, the fence
// and everything else tx does commit or roll back together: the lock is
// released when tx ends, either way, and there is no release to call.
//
// The lease is granted only once TxLease has written its record, which it
// refuses while another lease's record on the key (LeaseTable) has not
// expired (lock-delay): a record written in tx would vanish with it.
//
// It returns driver.ErrContended, leaving tx usable, when the key is held
// (by a session lock or another transaction: they share one lock space). Any other error aborts tx. The server ends tx's session when it
// sits idle between statements for TxIdleLimit(ttl), which rolls it back
// and frees the lock: a paused or cut-off holder loses the lock within
// about 2×ttl, and its commit then fails. TxLease counts tx's lease lost
// after ttl idle, so the lease always ends before the server can free the
// lock.
//
// A fence issued here is bumped only if tx commits, so a rolled-back tx's
// fence may be issued again: use it for writes inside tx (fence.Table with
// the same transaction), not to mark writes elsewhere. Within one
// transaction the lock is re-entrant: taking the same key twice in tx
// succeeds both times.
func AcquireTx(ctx context.Context, tx pgx.Tx, key string, ttl time.Duration, fencing bool) (fence int64, err error) {
	if tx == nil {
		return 0, errors.New("lockkit/pg: AcquireTx: nil transaction")
	}
	if err := checkKeyTTL(key, ttl); err != nil {
		return 0, err
	}
	query, args := sqlTx, []any{KeyID(key), ttlString(TxIdleLimit(ttl))}
	if fencing {
		query, args = fenceQuery(key, sqlTxFence, sqlTxFenceLong, append(args, key))
	}
	var (
		ok  bool
		set *string
	)
	if err := tx.QueryRow(ctx, query, args...).Scan(&ok, &fence, &set); err != nil {
		return 0, fmt.Errorf("lockkit/pg: acquire in transaction: %w", wrapTableErr(err))
	}
	if !ok {
		return 0, driver.ErrContended
	}
	return fence, nil
}

// TxIdleLimit is the idle_in_transaction_session_timeout AcquireTx gives a
// transaction that holds a lock for ttl: 2×ttl (at most PostgreSQL's
// largest), so that a lease renewed while the transaction has been idle for
// up to TxIdleLimit(ttl)-ttl still ends before the server may end the session.
func TxIdleLimit(ttl time.Duration) time.Duration {
	return min(2*ttl, maxTTL-time.Millisecond)
}

// Querier runs a query: *pgxpool.Pool satisfies it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxLease writes (after AcquireTx) or moves forward (at each extend), over
// db (not the transaction's own connection, which its owner is using), the
// lease record of the transaction on server process pid that holds key's
// lock (from AcquireTx with ttl and token): its expiry becomes the server's
// clock + ttl. It does so, and reports held, only if that transaction's
// session lives, the lock is granted, it has not sat idle in the
// transaction for more than TxIdleLimit(ttl)-ttl, and no other lease's
// record on the key is unexpired. held is false, nil when any of that is not
// so (pg_terminate_backend, the idle limit, a restart); an error means it
// cannot tell.
func TxLease(ctx context.Context, db Querier, pid uint32, key, token string, ttl time.Duration) (bool, error) {
	if db == nil {
		return false, errors.New("lockkit/pg: TxLease: nil database handle")
	}
	if err := checkKeyTTL(key, ttl); err != nil {
		return false, err
	}
	id := KeyID(key)
	classid, objid := lockIDs(id)
	var held bool
	err := db.QueryRow(ctx, sqlTxLease, int64(pid), classid, objid, ttlString(TxIdleLimit(ttl)-ttl), id, token, ttlMs(ttl)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("lockkit/pg: check the transaction's lock: %w", wrapTableErr(err))
	}
	return held, nil
}

// TxDrop deletes a transaction lease's record once its transaction has
// ended (committed or not), over db, so that the next holder is not
// delayed. A record left behind (an error here) only delays the next
// holder until the lease's expiry.
func TxDrop(ctx context.Context, db Execer, key, token string) error {
	if _, err := db.Exec(ctx, sqlDropRecord, KeyID(key), token); err != nil {
		return fmt.Errorf("lockkit/pg: drop the transaction's lease record: %w", err)
	}
	return nil
}
