package pgbackend_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	os.Exit(m.Run())
}

// ctxT is a context that ends with the test, or after d.
func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startPG starts a server and creates the fence table.
func startPG(t testing.TB) *testserver.Postgres {
	t.Helper()
	pg := testserver.StartPostgres(t)
	pool := testserver.PgxPool(t, pg.DSN(), 2)
	if err := pgbackend.Migrate(ctxT(t, 10*time.Second), pool); err != nil {
		t.Fatal(err)
	}
	return pg
}

func newBackend(t testing.TB, pool *pgxpool.Pool, opts pgbackend.Options) *pgbackend.Backend {
	t.Helper()
	b, err := pgbackend.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func req(key string, ttl time.Duration, fencing bool) *driver.Request {
	return &driver.Request{Key: key, Token: token(), TTL: ttl, Fencing: fencing}
}

// mustAcquire acquires r or fails the test.
func mustAcquire(t testing.TB, b *pgbackend.Backend, r *driver.Request) int64 {
	t.Helper()
	f, err := b.Acquire(ctxT(t, 5*time.Second), r)
	if err != nil {
		t.Fatalf("acquire %q: %v", r.Key, err)
	}
	if r.Fencing && f <= 0 {
		t.Fatalf("acquire %q: fence %d, want > 0", r.Key, f)
	}
	return f
}

// mustContend checks that r is refused as held.
func mustContend(t testing.TB, b *pgbackend.Backend, r *driver.Request) {
	t.Helper()
	f, err := b.Acquire(ctxT(t, 5*time.Second), r)
	if !errors.Is(err, driver.ErrContended) {
		t.Fatalf("acquire held %q: fence %d, err %v; want ErrContended", r.Key, f, err)
	}
}

// acquireWithin polls until r is acquired, for at most d, and returns how
// long that took. Errors other than ErrContended are retried too (a pool's
// connections may be dead after a restart).
func acquireWithin(t testing.TB, b *pgbackend.Backend, r *driver.Request, d time.Duration) (int64, time.Duration) {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < d {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		f, err := b.Acquire(ctx, r)
		cancel()
		if err == nil {
			return f, time.Since(start)
		}
		last = err
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("acquire %q: not acquired within %v; last error: %v", r.Key, d, last)
	return 0, 0
}

// holderPID is the PostgreSQL backend pid that holds key's advisory lock, or 0.
func holderPID(t testing.TB, pool *pgxpool.Pool, key string) int {
	t.Helper()
	id := pgbackend.KeyID(key)
	var pid int
	err := pool.QueryRow(ctxT(t, 5*time.Second), `SELECT coalesce((SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid = $1::oid AND objid = $2::oid LIMIT 1), 0)`,
		uint32(uint64(id)>>32), uint32(uint64(id))).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// storedFence is key's row in the fence table (0 when there is none).
func storedFence(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	var f int64
	var err error
	for range 3 { // after a restart, the pool's idle connections fail once each
		err = pool.QueryRow(ctxT(t, 5*time.Second),
			`SELECT coalesce((SELECT fence FROM lockkit_fences WHERE key = $1), 0)`, key).Scan(&f)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}
