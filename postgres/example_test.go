package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// A lockkit client on PostgreSQL advisory locks: create the fence table once
// (an explicit step, never done behind your back), then use the same
// generated helpers as on Redis. DoTx runs fn inside a transaction that holds
// the lock, so the lock and the work commit or roll back together.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil { // CREATE TABLE IF NOT EXISTS lockkit_fences
		log.Fatal(err)
	}
	client, err := lockkit.New(postgres.New(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	orders := client.Domain(lockkit.DomainSpec{Name: "order", Policy: lockkit.Policy{TTL: 10 * time.Second, Fencing: true}})
	order := orders.Key(16).Literal("order:").String("A-17").Lock()

	err = postgres.DoTx(ctx, pool, order, func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
		_, err := tx.Exec(ctx, `UPDATE orders SET state = 'paid' WHERE id = $1`, "A-17")
		return err
	})
	if err != nil {
		log.Print(err)
	}
}

// DoTx holds the lock for exactly the length of a transaction: the advisory
// lock is taken inside it (pg_try_advisory_xact_lock, retried per the
// domain's policy) and ends with its commit or rollback, so no write of fn
// can outlive the lock.
func ExampleDoTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := lockkit.New(postgres.New(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	seats := client.Domain(lockkit.DomainSpec{Name: "seat", Policy: lockkit.Policy{TTL: 10 * time.Second}})

	err = postgres.DoTx(ctx, pool, seats.Key(8).Literal("seat:").String("12C").Lock(),
		func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT taken FROM seats WHERE id = '12C'`).Scan(&taken); err != nil {
				return err
			}
			if taken {
				return nil
			}
			_, err := tx.Exec(ctx, `UPDATE seats SET taken = true WHERE id = '12C'`)
			return err // committed by DoTx when nil, rolled back otherwise
		})
	if err != nil {
		log.Print(err)
	}
}

// Migrate creates lockkit's tables (lockkit_fences, lockkit_leases) if they are missing. It
// is explicit, and idempotent: run it with the application's migrations.
func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

// KeyID finds a lock in pg_locks: who holds lock:{order:A-17} right now?
func ExampleKeyID() {
	id := postgres.KeyID("lock:{order:A-17}")
	fmt.Printf("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %d AND objid = %d\n",
		uint32(id>>32), uint32(id))
}

// Held session locks share a few connections of the pool, any number of
// locks on each. WithMaxHeld caps how many connections the locks take, so the
// application's own queries always find one; WithConnWait bounds the wait for
// the first.
func ExampleWithMaxHeld() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := lockkit.New(postgres.New(pool, postgres.WithMaxHeld(8)))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
}

// When the client has no session yet and the pool has no free connection, an
// acquire waits this long for one and then fails with ErrNoSession (and
// lockkit.ErrUnavailable) rather than hang.
func ExampleWithConnWait() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := lockkit.New(postgres.New(pool, postgres.WithConnWait(100*time.Millisecond)))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
}

// FenceRowKey finds the fence of a lock key too long for a btree row (over
// 2600 bytes) in lockkit_fences: such a key's fence is kept under its hash
// unless a row for the full key already exists.
func ExampleFenceRowKey() {
	long := "lock:{upload:" + strings.Repeat("x", 3000) + "}"
	row := postgres.FenceRowKey(long)
	fmt.Println(strings.HasPrefix(row, "lockkit:sha256:"), len(row))
	// Output: true 79
}
