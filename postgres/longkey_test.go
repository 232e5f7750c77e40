package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// TestLongFencingKey: fencing locks on 10 kB keys. An incompressible key,
// whose full string no btree row can hold, is acquired twice through the
// session backend and twice through DoTx, with strictly increasing fences.
// A compressible 10 kB key and a short key, whose full-key rows a v0.1.0
// process could have written (seeded here with a fence far in the future),
// keep using those rows: the next fence is above the seeded one. Before,
// every acquire of the incompressible key failed with ErrUnavailable (btree
// index row size, SQLSTATE 54000).
func TestLongFencingKey(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	ctx := ctxT(t, 60*time.Second)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	d := c.Domain(lockkit.DomainSpec{Name: "long", Policy: lockkit.Policy{TTL: 5 * time.Second, Fencing: true}})
	raw := make([]byte, 5000)
	_, _ = rand.Read(raw)
	random := hex.EncodeToString(raw) // 10,000 bytes, incompressible
	lockFor := func(id string) lockkit.Lock { return d.Key(32).Literal("long:").String(id).Lock() }

	var last int64
	next := func(how string, l lockkit.Lock) {
		t.Helper()
		var fence int64
		var err error
		if how == "DoTx" {
			err = postgres.DoTx(ctx, pool, l, func(_ context.Context, _ pgx.Tx, lease *lockkit.Lease) error {
				fence = lease.Fence()
				return nil
			})
		} else {
			err = l.Do(ctx, func(_ context.Context, lease *lockkit.Lease) error {
				fence = lease.Fence()
				return nil
			})
		}
		t.Logf("%s on a %d-byte key: fence %d", how, len(l.Key()), fence)
		if err != nil {
			msg := err.Error() // it quotes the key: keep the end, which says why
			t.Fatalf("%s on a %d-byte fencing key: …%s", how, len(l.Key()), msg[max(0, len(msg)-200):])
		}
		if fence <= last {
			t.Fatalf("%s: fence %d is not above the previous %d", how, fence, last)
		}
		last = fence
	}
	long := lockFor(random)
	next("Do", long)
	next("Do", long)
	next("DoTx", long)
	next("DoTx", long)
	next("Do", long)

	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lockkit_fences WHERE key = $1 OR key = $2", long.Key(), postgres.FenceRowKey(long.Key())).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("fence rows for the long key: %d (%v); want the hashed one only", rows, err)
	}

	// A full-key row that appears after the hashed one (a v0.1.0 process
	// took a compressible key first fenced here): the next fence is above both.
	late := lockFor(strings.Repeat("y", 10000))
	next("Do", late)
	future := time.Now().Add(24 * time.Hour).UnixMicro()
	if _, err := pool.Exec(ctx, "UPDATE lockkit_fences SET fence = $2 WHERE key = $1", postgres.FenceRowKey(late.Key()), future); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO lockkit_fences (key, fence) VALUES ($1, $2)", late.Key(), last+1); err != nil {
		t.Fatalf("seeding a v0.1.0 row for a compressible 10 kB key: %v", err)
	}
	last = future
	next("DoTx", late)
	next("Do", late)

	// Rows a v0.1.0 process could have written keep being used.
	future = time.Now().Add(48 * time.Hour).UnixMicro()
	for _, id := range []string{strings.Repeat("x", 10000), "short"} {
		l := lockFor(id)
		if _, err := pool.Exec(ctx, "INSERT INTO lockkit_fences (key, fence) VALUES ($1, $2)", l.Key(), future); err != nil {
			t.Fatalf("seeding a v0.1.0 row for a %d-byte key: %v", len(l.Key()), err)
		}
		last = future
		next("Do", l)
		next("DoTx", l)
	}
}
