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
// It returns driver.ErrContended, leaving tx usable, when the key is held
// (by a session lock or another transaction: they share one lock space).
// Any other error aborts tx. The ttl is the longest tx may sit idle between
// statements before the server ends its session, which rolls it back and
// frees the lock: a paused or cut-off holder loses the lock within about
// ttl, and its commit then fails.
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
	query, args := sqlTx, []any{KeyID(key), ttlString(ttl)}
	if fencing {
		query, args = sqlTxFence, append(args, key)
	}
	var (
		ok  bool
		set *string
	)
	if err := tx.QueryRow(ctx, query, args...).Scan(&ok, &fence, &set); err != nil {
		if fencing {
			err = wrapFenceErr(err)
		}
		return 0, fmt.Errorf("lockkit/pg: acquire in transaction: %w", err)
	}
	if !ok {
		return 0, driver.ErrContended
	}
	return fence, nil
}
