package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// Guarantee 7 for DoTx: every statement it sends on the lock's behalf
// (BEGIN, the acquire, the lease record's write, the rollback) is bounded
// by the client's command timeout (500ms here), whatever the caller's ctx.
// These tests run DoTx under context.Background(), so that nothing else can
// end a statement, and give it patience (8s) before they unblock the server.

const (
	txPatience = 8 * time.Second // how long a test waits for DoTx before it unblocks the server
	txBound    = 3 * time.Second // what DoTx may take: a few command timeouts and the 500ms connection wait
)

// txRun is a DoTx running on a goroutine of its own.
type txRun struct {
	start time.Time
	done  chan struct{}
	err   error
	took  time.Duration
	ran   atomic.Bool // fn was called
}

// startDoTx runs DoTx under context.Background() on a goroutine of its own.
func startDoTx(pool *pgxpool.Pool, lock lockkit.Lock, fn func(context.Context, pgx.Tx, *lockkit.Lease) error) *txRun {
	r := &txRun{start: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = postgres.DoTx(context.Background(), pool, lock, func(ctx context.Context, tx pgx.Tx, l *lockkit.Lease) error {
			r.ran.Store(true)
			return fn(ctx, tx, l)
		})
		r.took = time.Since(r.start)
	}()
	return r
}

// returned reports whether DoTx returned within d.
func (r *txRun) returned(d time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(d):
		return false
	}
}

// wantUnavailable checks a finished run that ended (within txPatience) in
// what guarantee 7 promises where DoTx cannot take its lock (where says
// where): within txBound, ErrUnavailable, fn not run.
func (r *txRun) wantUnavailable(t *testing.T, where string, ended bool) {
	t.Helper()
	t.Logf("DoTx %s: %v after %v (fn ran: %v)", where, r.err, r.took.Round(time.Millisecond), r.ran.Load())
	if !ended || r.took > txBound {
		t.Fatalf("guarantee 7: DoTx under context.Background() took %v %s (%v patience); want at most %v", r.took.Round(time.Millisecond), where, txPatience, txBound)
	}
	if r.ran.Load() || !errors.Is(r.err, lockkit.ErrUnavailable) {
		t.Fatalf("DoTx %s: fn ran %v, err %v; want fn not run and ErrUnavailable", where, r.ran.Load(), r.err)
	}
}

// finish waits, bounded, for DoTx to end once the test has unblocked it.
func (r *txRun) finish(t *testing.T) {
	t.Helper()
	if !r.returned(20 * time.Second) {
		t.Fatalf("DoTx still running 20s after the server was unblocked (%v after its start)", time.Since(r.start).Round(time.Millisecond))
	}
}

// txPool is a pool for DoTx whose idle connections are handed out without
// a liveness ping (pgxpool pings one idle for over a second, within DoTx's
// 500ms connection wait), so that on a paused server DoTx's connection
// comes at once and its BEGIN is the first statement it waits for.
func txPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// takeable checks that another client can take key (the same domain name
// and id) within 10s: DoTx left nothing held.
func takeable(t *testing.T, c *lockkit.Client, name, id string) {
	t.Helper()
	p := lockkit.Policy{TTL: time.Second, Retry: lockkit.Retry{Attempts: 1000, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1.5, MaxWait: 10 * time.Second}}
	start := time.Now()
	if err := lockOf(c, name, p, id).Do(ctxT(t, 15*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("another client cannot take the key after DoTx returned: %v", err)
	}
	t.Logf("another client took the key %v later", time.Since(start).Round(time.Millisecond))
}

// TestDoTxBoundedOnPausedServer: the server is paused (SIGSTOP) before
// DoTx's BEGIN, or while fn runs (fn then fails, and DoTx rolls back).
// DoTx under context.Background() returns within a few command timeouts,
// and once the server is resumed the key is free to another client. Before,
// BEGIN ran under the caller's ctx only (DoTx returned at that ctx's end:
// 8.0s for an 8s ctx, never with context.Background()), and the rollback
// had 5s of its own (DoTx returned 5.5s after fn).
func TestDoTxBoundedOnPausedServer(t *testing.T) {
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	other := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	p := lockkit.Policy{TTL: 2 * time.Second}
	errBoom := errors.New("boom")

	t.Run("BeforeBegin", func(t *testing.T) {
		pool := txPool(t, pg.DSN())
		// Warm the pool: DoTx's connection is an idle one.
		if err := postgres.DoTx(ctxT(t, 5*time.Second), pool, lockOf(c, "pausedtx", p, "warm"), func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
		pg.Pause(t)
		r := startDoTx(pool, lockOf(c, "pausedtx", p, "begin"), func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil })
		ended := r.returned(txPatience)
		pg.Resume(t)
		r.finish(t)
		r.wantUnavailable(t, "on a paused server", ended)
		takeable(t, other, "pausedtx", "begin")
	})

	t.Run("BeforeRollback", func(t *testing.T) {
		pool := txPool(t, pg.DSN())
		pause, paused := make(chan struct{}), make(chan struct{})
		r := startDoTx(pool, lockOf(c, "pausedtx", p, "rollback"), func(ctx context.Context, tx pgx.Tx, _ *lockkit.Lease) error {
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
				return err
			}
			close(pause)
			<-paused
			return errBoom
		})
		select {
		case <-pause:
		case <-r.done:
			t.Fatalf("DoTx ended before fn paused the server: %v", r.err)
		}
		pg.Pause(t)
		at := time.Now()
		close(paused)
		ended := r.returned(txPatience)
		took := time.Since(at)
		pg.Resume(t)
		r.finish(t)
		t.Logf("DoTx whose fn failed on a paused server: %v, %v after fn returned", r.err, took.Round(time.Millisecond))
		if !ended || took > txBound {
			t.Fatalf("guarantee 7: DoTx took %v after fn returned on a paused server; want at most %v", took.Round(time.Millisecond), txBound)
		}
		if !errors.Is(r.err, errBoom) {
			t.Fatalf("DoTx = %v, want fn's error", r.err)
		}
		takeable(t, other, "pausedtx", "rollback")
	})
}

// TestDoTxBoundedBehindARowLock: an application transaction holds a row
// that DoTx's statements must lock: the fence row (a fencing domain's
// acquire upserts it) or the key's lease record (the record's write after
// the grant). DoTx under context.Background() gives up within a few command
// timeouts, as an acquire does, leaving the key free once that transaction
// ends. Before, those statements ran under the caller's ctx only: DoTx
// waited as long as the application's transaction (8.0s with an 8s ctx,
// where TryDo gave up after 501ms).
func TestDoTxBoundedBehindARowLock(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	other := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	for _, tc := range []struct {
		name    string
		fencing bool
	}{
		{"FenceRow", true},
		{"LeaseRecord", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk := lockOf(c, "rowtx", lockkit.Policy{TTL: 2 * time.Second, Fencing: tc.fencing}, tc.name)
			lockRow := "SELECT 1 FROM lockkit_leases WHERE id = $1 FOR UPDATE"
			arg := any(postgres.KeyID(lk.Key()))
			if tc.fencing {
				// The fence row, from a first grant.
				if err := lk.TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
					t.Fatal(err)
				}
				lockRow, arg = "SELECT 1 FROM lockkit_fences WHERE key = $1 FOR UPDATE", lk.Key()
			} else if _, err := admin.Exec(ctxT(t, 5*time.Second), `INSERT INTO lockkit_leases (id, token, expires)
				VALUES ($1, 'expired', now() - interval '1 hour')`, arg); err != nil {
				t.Fatal(err) // an expired record: it delays nobody, but its row can be locked
			}
			unlockRow := testserver.HoldRow(t, admin, lockRow, arg)
			r := startDoTx(pool, lk, func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil })
			ended := r.returned(txPatience)
			unlockRow()
			r.finish(t)
			r.wantUnavailable(t, "behind a row lock", ended)
			takeable(t, other, "rowtx", tc.name)
		})
	}
}
