package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// advisoryLocks counts the advisory locks granted on the server.
func advisoryLocks(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctxT(t, 5*time.Second), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// txEnv is a server with a table "written" for DoTx tests to insert into.
type txEnv struct {
	pg          *testserver.Postgres
	pool, admin *pgxpool.Pool
	ctx         context.Context
}

func newTxEnv(t *testing.T) *txEnv {
	t.Helper()
	pg := startPG(t)
	e := &txEnv{pg: pg, pool: testserver.PgxPool(t, pg.DSN(), 4), admin: testserver.PgxPool(t, pg.DSN(), 1), ctx: ctxT(t, 30*time.Second)}
	if _, err := e.admin.Exec(e.ctx, "CREATE TABLE written (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return e
}

// setSync sets synchronous_standby_names ("nobody": commits wait for a
// standby that never comes) and reloads; safe from any goroutine.
func (e *txEnv) setSync(t *testing.T, v string) {
	if _, err := e.admin.Exec(e.ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+v+"'"); err != nil {
		t.Error(err)
	}
	if _, err := e.admin.Exec(e.ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Error(err)
	}
}

// rows counts the committed rows of written.
func (e *txEnv) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(e.ctx, "SELECT count(*) FROM written").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCloseDuringDoTx: Close starts while DoTx's fn runs; fn (having written
// a row) returns nil 100ms later. The commit must complete (within Close's
// ctx) and DoTx return nil with the row committed, Close return nil, and no
// advisory lock be left. Before, the history: the commit failed with
// "context canceled", the row rolled back.
func TestCloseDuringDoTx(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	pg, pool, admin, ctx := e.pg, e.pool, e.admin, e.ctx
	c, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 2)), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	lock := lockOf(c, "txclose", lockkit.Policy{TTL: 5 * time.Second}, "x")
	inFn := make(chan struct{})
	closing := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- postgres.DoTx(ctx, pool, lock, func(ctx context.Context, tx pgx.Tx, _ *lockkit.Lease) error {
			if _, err := tx.Exec(ctx, "INSERT INTO written VALUES (1)"); err != nil {
				return err
			}
			close(inFn)
			<-closing
			time.Sleep(100 * time.Millisecond)
			return nil
		})
	}()
	<-inFn
	close(closing)
	cerr := c.Close(ctxT(t, 10*time.Second))
	derr := <-done
	n := e.rows(t)
	locks := advisoryLocks(t, admin)
	t.Logf("Close = %v; DoTx = %v; rows committed %d; advisory locks left %d", cerr, derr, n, locks)
	if cerr != nil {
		t.Errorf("Close = %v, want nil", cerr)
	}
	if derr != nil || n != 1 {
		t.Errorf("DoTx = %v with %d rows committed; want nil with the row committed", derr, n)
	}
	if locks != 0 {
		t.Errorf("%d advisory locks left after Close and DoTx", locks)
	}
}

// TestCloseDuringWaitingDo: a Do waits (retrying, max wait 10s) for a key
// another client holds; Close on the waiter's client must end it at once
// with ErrClosed. Before, the issue's history: ErrUnavailable ("backend
// closed") after the full max wait.
func TestCloseDuringWaitingDo(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	holder := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	waiter, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 2)), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	p := lockkit.Policy{TTL: 5 * time.Second, Retry: lockkit.Retry{Attempts: 100000, Initial: 50 * time.Millisecond,
		Max: 200 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxWait: 10 * time.Second}}
	held, err := lockOf(holder, "waitclose", p, "x").TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctxT(t, 5*time.Second))
	done := make(chan error, 1)
	ran := false
	go func() {
		done <- lockOf(waiter, "waitclose", p, "x").Do(ctxT(t, 30*time.Second), func(context.Context, *lockkit.Lease) error {
			ran = true
			return nil
		})
	}()
	time.Sleep(500 * time.Millisecond) // the Do is waiting
	start := time.Now()
	if err := waiter.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Errorf("Close = %v", err)
	}
	var derr error
	select {
	case derr = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting Do did not return within 15s of Close")
	}
	took := time.Since(start)
	t.Logf("Do = %v, %v after Close started", derr, took)
	if ran {
		t.Error("fn ran")
	}
	if !errors.Is(derr, lockkit.ErrClosed) {
		t.Errorf("Do = %v, want ErrClosed", derr)
	}
	if took > time.Second {
		t.Errorf("the waiting Do returned %v after Close started; want within 1s", took)
	}
}

// TestCloseDuringDoTxCommitWait: Close (ctx 300ms) while DoTx's commit waits
// for an absent synchronous standby. Close returns at its ctx's end; the
// sent commit is not cancelled: once the standby requirement is lifted it
// commits, DoTx returns nil and no advisory lock is left. Close reports that
// its ctx ended with the lease not released.
func TestCloseDuringDoTxCommitWait(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	pg, pool, admin, ctx := e.pg, e.pool, e.admin, e.ctx
	c, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 2)), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	lock := lockOf(c, "txclosewait", lockkit.Policy{TTL: time.Second}, "x")
	e.setSync(t, "nobody")
	time.Sleep(200 * time.Millisecond) // the reload reaches new sessions
	inFn := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- postgres.DoTx(ctx, pool, lock, func(ctx context.Context, tx pgx.Tx, _ *lockkit.Lease) error {
			if _, err := tx.Exec(ctx, "INSERT INTO written VALUES (1)"); err != nil {
				return err
			}
			close(inFn)
			return nil // the commit now waits for the standby
		})
	}()
	<-inFn
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	cerr := c.Close(cctx)
	cancel()
	took := time.Since(start)
	select {
	case err := <-done:
		t.Fatalf("DoTx returned %v while its commit should still wait", err)
	default:
	}
	e.setSync(t, "")
	derr := <-done
	n := e.rows(t)
	locks := advisoryLocks(t, admin)
	t.Logf("Close = %v after %v; DoTx = %v; rows committed %d; advisory locks left %d", cerr, took, derr, n, locks)
	if took > 3*time.Second {
		t.Errorf("Close took %v with a 300ms ctx", took)
	}
	if !errors.Is(cerr, context.DeadlineExceeded) {
		t.Errorf("Close = %v; want its ctx's end reported (the lease was not released in time)", cerr)
	}
	if derr != nil || n != 1 {
		t.Errorf("DoTx = %v with %d rows committed; want nil with the row committed", derr, n)
	}
	if locks != 0 {
		t.Errorf("%d advisory locks left", locks)
	}
}
