package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/internal/benchkit"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// BenchmarkSemaphoreAcquireRelease: one uncontended permit of a 3-permit
// semaphore, TryAcquire + Release through the Client, against the floor a
// hand-written permit costs on PostgreSQL (pg_try_advisory_lock +
// pg_advisory_unlock of one slot's id, on a connection held for the run),
// paired iteration by iteration (internal/benchkit.Paired):
//
//	go test ./postgres -run '^$' -bench SemaphoreAcquireRelease -benchtime 3000x -count 3
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 8)
	c := newClient(b, pool)
	sem := c.Domain(lockkit.DomainSpec{Name: "bench-sem", Policy: lockkit.Policy{TTL: 10 * time.Second, Kind: "semaphore", Permits: 3}}).
		Key(16).Literal("bench-sem").Semaphore()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	id := postgres.KeyID("floor:{sem}:permit:0")
	benchkit.Paired(b,
		benchkit.Op{Name: "floor", Do: func() error {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("lock: %v %w", ok, err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("unlock: %v %w", ok, err)
			}
			return nil
		}},
		benchkit.Op{Name: "lockkit", Do: func() error {
			lease, err := sem.TryAcquire(ctx)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
	)
}

// BenchmarkElectionTakeover: the time from killing a leader (every session
// of its pool terminated with pg_terminate_backend: no resign, no renewal)
// to a standby's next term, at a 1 s TTL (internal/benchkit.Takeover). The
// advisory lock goes with the session; the lease record keeps the key until
// the dead leader's lease runs out (guarantee 1's lock-delay).
//
//	go test ./postgres -run '^$' -bench ElectionTakeover -benchtime 5x -count 2
func BenchmarkElectionTakeover(b *testing.B) {
	pg := startPG(b)
	admin := testserver.PgxPool(b, pg.DSN(), 2)
	const ttl = time.Second
	standby, err := lockkit.New(postgres.New(testserver.PgxPool(b, pg.DSN(), 8)),
		lockkit.WithLogger(slog.New(slog.DiscardHandler)), benchkit.CommandTimeout(ttl))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = standby.Close(ctxT(b, 5*time.Second)) })
	var n atomic.Int32
	benchkit.Takeover(b, ttl, standby, func() benchkit.Client {
		name := fmt.Sprintf("bench-leader-%d", n.Add(1))
		cfg, err := pgxpool.ParseConfig(pg.DSN())
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		c, err := lockkit.New(postgres.New(pool), lockkit.WithLogger(slog.New(slog.DiscardHandler)), benchkit.CommandTimeout(ttl))
		if err != nil {
			b.Fatal(err)
		}
		return benchkit.Client{C: c, Kill: func() error {
			_, err := admin.Exec(context.Background(),
				`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, name)
			return err
		}}
	})
}
