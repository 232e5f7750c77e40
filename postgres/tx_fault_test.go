package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// sessionLockWatch polls the key's advisory lock from a session of its own
// every 10ms until ctx ends, and reports when it was first granted (zero if
// never). It holds the lock once granted.
func sessionLockWatch(ctx context.Context, t *testing.T, dsn, key string) func() time.Time {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var at atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", postgres.KeyID(key)).Scan(&ok); err == nil && ok {
				at.Store(time.Now().UnixNano())
				<-ctx.Done()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() time.Time {
		<-done
		if n := at.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
}

// TestDoTxSessionEnded: a DoTx transaction's session ended by the server
// while fn works, by pg_terminate_backend, or by the idle-in-transaction
// limit while fn works outside the database for 3 TTLs. Its lease must be
// lost (fn's ctx cancelled, DoTx an ErrLockLost): before anyone else can be
// granted the key after the idle limit, and within a renew interval of the
// termination (which frees the lock at once). Before, DoTx's extend always succeeded: the lease stayed
// valid while another session held the lock.
func TestDoTxSessionEnded(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	for _, how := range []string{"terminated", "idle in transaction"} {
		t.Run(how, func(t *testing.T) {
			const ttl = time.Second
			lock := lockOf(c, "txend", lockkit.Policy{TTL: ttl}, how)
			wctx, stop := context.WithCancel(ctxT(t, 30*time.Second))
			defer stop()
			var granted func() time.Time
			var lostAt time.Time
			err := postgres.DoTx(ctxT(t, 20*time.Second), pool, lock, func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return err
				}
				granted = sessionLockWatch(wctx, t, pg.DSN(), lock.Key())
				if how == "terminated" {
					pid := holderPID(t, admin, lock.Key())
					if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
						return err
					}
				}
				select {
				case <-ctx.Done():
					lostAt = time.Now()
				case <-time.After(3 * ttl):
				}
				if lease.Err() != nil && lostAt.IsZero() {
					lostAt = time.Now()
				}
				return nil
			})
			time.Sleep(200 * time.Millisecond)
			stop()
			g := granted()
			t.Logf("DoTx = %v; lease lost at %v, another session granted at %v", err, lostAt.Format("15:04:05.000"), g.Format("15:04:05.000"))
			if lostAt.IsZero() {
				t.Fatalf("%s: the lease stayed valid for 3 TTLs", how)
			}
			if !g.IsZero() && g.Before(lostAt) {
				if how == "terminated" {
					// pg_terminate_backend frees the lock at once; the lease
					// learns of it at its next renewal (TTL/3). Closing this
					// window needs a lock-delay record (issue #29; see
					// docs/backends.md): until then, bound it.
					if d := lostAt.Sub(g); d > ttl/3+time.Second {
						t.Fatalf("terminated: the lease was lost %v after another session was granted the key; want within a renew interval", d)
					}
				} else {
					t.Fatalf("%s: another session was granted the key %v before the lease was lost", how, lostAt.Sub(g))
				}
			}
			if !errors.Is(err, lockkit.ErrLockLost) {
				t.Fatalf("%s: DoTx = %v, want ErrLockLost", how, err)
			}
		})
	}
}

// TestDoTxBeginBounded: with every pool connection taken, DoTx fails within
// the connection wait with ErrNoSession (and ErrUnavailable). Before, Begin
// waited for a connection until ctx ended.
func TestDoTxBeginBounded(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 2)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	for range 2 {
		conn, err := pool.Acquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
	}
	start := time.Now()
	err := postgres.DoTx(ctxT(t, 8*time.Second), pool, lockOf(c, "txbegin", lockkit.Policy{TTL: time.Second}, "x"),
		func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil })
	took := time.Since(start)
	t.Logf("DoTx on an exhausted pool: %v after %v", err, took)
	if !errors.Is(err, postgres.ErrNoSession) || !errors.Is(err, lockkit.ErrUnavailable) {
		t.Fatalf("DoTx = %v, want ErrNoSession and ErrUnavailable", err)
	}
	if took > 3*time.Second {
		t.Fatalf("DoTx took %v on an exhausted pool; want about the 500ms connection wait", took)
	}
}

// TestDoTxCommitOutlivesLease: the commit waits for a synchronous standby
// that is configured but absent, past the lease's deadline (renewal off).
// The commit must not be cancelled, and once the standby requirement is
// lifted it commits and DoTx reports nil. Before, the lease's loss
// cancelled the commit and DoTx reported ErrLockLost ("rolled back") for a
// row that had committed.
func TestDoTxCommitOutlivesLease(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	pg, pool, ctx := e.pg, e.pool, e.ctx
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	lock := lockOf(c, "txsync", lockkit.Policy{TTL: time.Second, Renew: -1}, "x")
	e.setSync(t, "nobody")
	time.Sleep(200 * time.Millisecond) // the reload reaches new sessions
	lifted := make(chan struct{})
	go func() {
		defer close(lifted)
		time.Sleep(2500 * time.Millisecond) // the lease's deadline is long past
		e.setSync(t, "")
	}()
	defer func() { <-lifted }()
	err := postgres.DoTx(ctx, pool, lock, func(ctx context.Context, tx pgx.Tx, _ *lockkit.Lease) error {
		_, err := tx.Exec(ctx, "INSERT INTO written VALUES (1)")
		return err
	})
	<-lifted
	n := e.rows(t)
	t.Logf("DoTx = %v; rows committed %d", err, n)
	if n == 1 && err != nil {
		t.Fatalf("the row committed but DoTx reported %v", err)
	}
	if n == 0 && err == nil {
		t.Fatal("DoTx reported nil but nothing committed")
	}
	if n != 1 {
		t.Fatalf("the commit did not complete once the standby requirement was lifted: %v", err)
	}
}

// TestTTLOverLimitRefused: a domain whose TTL is over PostgreSQL's largest
// idle limit (about 24.8 days) is refused when declared, with an error that
// names the domain and the limit. Before, it was accepted and every acquire
// failed with a retryable ErrUnavailable.
func TestTTLOverLimitRefused(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	d := c.Domain(lockkit.DomainSpec{Name: "forever", Policy: lockkit.Policy{TTL: 25 * 24 * time.Hour}})
	err := d.Err()
	t.Logf("domain error: %v", err)
	if err == nil || !strings.Contains(err.Error(), `"forever"`) || !strings.Contains(err.Error(), "largest") {
		t.Fatalf("domain with a 25-day TTL: Err() = %v; want a refusal naming the domain and the limit", err)
	}
	if err := c.Domain(lockkit.DomainSpec{Name: "long", Policy: lockkit.Policy{TTL: 24 * 24 * time.Hour}}).Err(); err != nil {
		t.Fatalf("a 24-day TTL is within the limit: %v", err)
	}
}
