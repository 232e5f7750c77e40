package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/goredis"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/lockkit"
)

// Guard a value in Redis with the lease's fence. If this process was paused
// past the TTL and another one took the lock and wrote meanwhile, the write
// is turned away with ErrFenced instead of overwriting the newer value.
func ExampleSet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	// Generated code does this part: locks.Table("12").
	tables := client.Domain(lockkit.DomainSpec{
		Name:    "table",
		Pattern: "table:{id}",
		Policy:  lockkit.Policy{TTL: 10 * time.Second, Fencing: true},
	})
	table12 := tables.Key(8).Literal("table:").String("12").Lock()

	err = table12.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return fence.Set(ctx, rdb, "booking:table:12", "guest 7", lease.Fence())
	})
	switch {
	case errors.Is(err, fence.ErrFenced):
		log.Printf("our lease was lost and a newer holder has written: %v", err)
	case err != nil:
		log.Fatal(err)
	}
}

// Read a fenced value and the fence it was written with: in the service that
// owns the resource, which needs only this package, not the lock runtime.
func ExampleGet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	guest, n, err := fence.Get(ctx, rdb, "booking:table:12")
	switch {
	case errors.Is(err, redis.Nil):
		fmt.Println("table 12 was never booked")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("table 12 is booked by %s (fence %d)\n", guest, n)
	}
}

// Guard a SQL row with the lease's fence. The table needs a fence column
// once:
//
//	ALTER TABLE bookings ADD COLUMN fence bigint;
func ExampleTable_Update() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	bookings := fence.Table{Table: "bookings", KeyColumn: "id"}

	var table12 lockkit.Lock // from generated code: locks.Table("12")
	err = table12.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// ... other writes of the booking, in the same transaction ...
		err = bookings.Update(ctx, tx, "12", lease.Fence(),
			fence.Column{Name: "guest", Value: "guest 7"},
			fence.Column{Name: "booked_at", Value: time.Now()})
		if err != nil {
			return err // ErrFenced: roll everything back
		}
		return tx.Commit()
	})
	if errors.Is(err, fence.ErrFenced) {
		log.Printf("our lease was lost and a newer holder has written: %v", err)
	}
}

// Statement gives the conditional UPDATE to run yourself, e.g. with a
// pgxpool.Pool: zero rows affected means the row is missing or its fence is
// above ours.
func ExampleTable_Statement() {
	bookings := fence.Table{Table: "bookings", KeyColumn: "id"}
	query, args, err := bookings.Statement("12", 1795316552359147, fence.Column{Name: "guest", Value: "guest 7"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(query)
	fmt.Println(args...)
	// pool.Exec(ctx, query, args...)

	// Output:
	// UPDATE "bookings" SET "guest" = $1, "fence" = $2 WHERE "id" = $3 AND ("fence" IS NULL OR "fence" <= $4)
	// guest 7 1795316552359147 12 1795316552359147
}
