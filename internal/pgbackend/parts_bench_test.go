package pgbackend

// An internal test file: it runs the backend's own statements (sqlTry,
// sqlUnlock) by hand on the backend's own session.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// BenchmarkAcquireReleaseParts splits an uncontended acquire + release on
// PostgreSQL into its layers, interleaved in every iteration (order
// rotated) and each reported as its median µs and the median of its
// per-iteration ratios to the floor:
//
//   - floor: pg_try_advisory_lock + pg_advisory_unlock on a pooled
//     connection (as in postgres.BenchmarkAcquireReleasePaired);
//
//   - sql: the backend's two statements (sqlTry, sqlUnlock: the lease
//     record written and deleted) by hand through pgx, on the backend's own
//     session: what the server and pgx cost;
//
//   - backend: Backend.Acquire + Release on that session: sql plus the
//     backend's bookkeeping;
//
//   - client: TryAcquire + Release through a lockkit.Client on that backend:
//     backend plus the runtime (the command timeout's ctx, the breaker,
//     telemetry with no provider, the lease's timers);
//
//   - shared: client on a second backend whose one session also carries
//     another lease, held for the run: a statement on a session with
//     another valid lease runs in a goroutine of its own (the caller may
//     leave at its ctx, and the connection must not close under the other
//     lease), a hand-off each way.
//
//     go test ./internal/pgbackend -run '^$' -bench AcquireReleaseParts -benchtime 3000x -count 3
func BenchmarkAcquireReleaseParts(b *testing.B) {
	pg := testserver.StartPostgres(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 8)
	if err := Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	newClient := func() (*Backend, *lockkit.Client) {
		be, err := New(pool, Options{})
		if err != nil {
			b.Fatal(err)
		}
		c, err := lockkit.New(driver.Spec{Name: "postgres", Open: func(driver.Config) (driver.Backend, error) { return be, nil }})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		return be, c
	}
	cycle := func(l lockkit.Lock) func() {
		return func() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	policy := lockkit.Policy{TTL: 10 * time.Second}

	floorID := KeyID("lock:{parts-floor}")
	floor := func() {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", floorID).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", floorID).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}

	be, c := newClient()
	r := &driver.Request{Key: "lock:{parts-backend}", Token: "parts", TTL: policy.TTL}
	backend := func() {
		if _, err := be.Acquire(ctx, r); err != nil {
			b.Fatal(err)
		}
		if held, err := be.Release(ctx, r.Key, r.Token); !held || err != nil {
			b.Fatal(held, err)
		}
	}
	backend() // opens the session the others use
	be.mu.Lock()
	s := be.sessions[0]
	be.mu.Unlock()
	sqlID := KeyID("lock:{parts-sql}")
	sql := func() {
		select { // the session's statement slot, as the backend takes it
		case s.op <- struct{}{}:
		case <-s.gone:
			b.Fatal("the backend's session ended")
		}
		defer func() { <-s.op }()
		var ok bool
		var fence int64
		if err := s.conn.QueryRow(ctx, sqlTry, sqlID, "", "parts", ttlMs(policy.TTL)).Scan(&ok, &fence, nil, nil); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := s.conn.QueryRow(ctx, sqlUnlock, sqlID, "parts").Scan(&ok, nil); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	dc := c.Domain(lockkit.DomainSpec{Name: "parts", Policy: policy})
	client := cycle(dc.Key(8).Literal("client").Lock())

	_, c2 := newClient()
	d2 := c2.Domain(lockkit.DomainSpec{Name: "parts", Policy: policy})
	other, err := d2.Key(8).Literal("other").Lock().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := other.Release(ctx); err != nil {
			b.Error(err)
		}
	}()
	shared := cycle(d2.Key(8).Literal("shared").Lock())

	names := []string{"floor", "sql", "backend", "client", "shared"}
	ops := []func(){floor, sql, backend, client, shared}
	for _, op := range ops { // warm: statements prepared
		op()
	}
	n := len(ops)
	ns := make([][]float64, n)
	ratio := make([][]float64, n)
	d := make([]float64, n)
	i := 0
	for b.Loop() {
		for k := range n {
			j := (i + k) % n
			t0 := time.Now()
			ops[j]()
			d[j] = float64(time.Since(t0).Nanoseconds())
		}
		i++
		for j := range n {
			ns[j] = append(ns[j], d[j])
			ratio[j] = append(ratio[j], d[j]/d[0])
		}
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(0, "ns/op")
	for j := range n {
		b.ReportMetric(med(ns[j])/1e3, names[j]+"-µs")
		if j > 0 {
			b.ReportMetric(med(ratio[j]), names[j]+"/floor")
		}
	}
}
