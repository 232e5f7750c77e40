package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// TestDoTxAbortedTransaction: fn runs a statement that fails (aborting the
// transaction), ignores its error and returns nil. The commit then rolls
// back, and the server said so: DoTx's error says it rolled back, and does
// not match ErrCommitUnknown (an attack review: it did, for pgx's
// ErrTxCommitRollback). Nothing fn wrote stays, and the key is free after.
func TestDoTxAbortedTransaction(t *testing.T) {
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	if _, err := pool.Exec(ctxT(t, 10*time.Second), `CREATE TABLE aborted (v text)`); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, pool)
	lk := lockOf(c, "txabort", lockkit.Policy{TTL: 5 * time.Second}, "x")
	err := postgres.DoTx(ctxT(t, 10*time.Second), pool, lk, func(ctx context.Context, tx pgx.Tx, _ *lockkit.Lease) error {
		if _, err := tx.Exec(ctx, `INSERT INTO aborted VALUES ('kept?')`); err != nil {
			return err
		}
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // fails: the transaction is aborted
		return nil
	})
	t.Logf("DoTx after an aborted statement: %v", err)
	if err == nil || errors.Is(err, postgres.ErrCommitUnknown) || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("DoTx = %v; want a rolled-back commit, not ErrCommitUnknown (the server answered)", err)
	}
	var n int
	if err := pool.QueryRow(ctxT(t, 5*time.Second), `SELECT count(*) FROM aborted`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows fn wrote: %d (%v), want none", n, err)
	}
	if err := lk.TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("TryDo after the rolled-back DoTx: %v", err)
	}
}
