package postgres_test

import (
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/driver/drivertest"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/postgres"
)

// TestConformance runs the backend conformance suite on PostgreSQL 15: a
// key is taken from its holder by terminating the holder's session, and the
// server is stopped and started again on its data directory (the fence
// table survives).
func TestConformance(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	drivertest.Run(t, drivertest.Harness{
		Name: "postgres",
		Open: func(t *testing.T) driver.Spec {
			return postgres.New(testserver.PgxPool(t, pg.DSN(), 8))
		},
		TTL: time.Second,
		Steal: func(t *testing.T, key string) {
			pid := holderPID(t, admin, key)
			if pid == 0 {
				t.Fatalf("no session holds %s", key)
			}
			var ok bool
			if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
			}
			// An operator taking the lock away on purpose (as Redis's
			// harness deletes the key) also deletes the lease record;
			// without that, the next holder waits for the lease's
			// deadline (TestLockDelay).
			if _, err := admin.Exec(ctxT(t, 5*time.Second), "DELETE FROM lockkit_leases WHERE id = $1", postgres.KeyID(key)); err != nil {
				t.Fatal(err)
			}
		},
		Stop:  func(t *testing.T) { pg.Stop(t) },
		Start: func(t *testing.T) { pg.Restart(t) },
	})
}
