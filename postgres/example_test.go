package postgres_test

import (
	"context"
	"log"
	"os"
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
func ExampleBackend() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil { // CREATE TABLE IF NOT EXISTS lockkit_fences
		log.Fatal(err)
	}
	client, err := lockkit.New(postgres.Backend(pool))
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
