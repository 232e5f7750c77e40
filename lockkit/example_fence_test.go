package lockkit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/lockkit"
)

// Guard a value in Redis with the lease's fence. If this process was paused
// past the TTL and another one took the lock and wrote meanwhile, the write
// is turned away with ErrFenced instead of overwriting the newer value.
func ExampleFencedSet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	client, err := lockkit.New(lockkit.Redis(rdb))
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
		return lockkit.FencedSet(ctx, rdb, "booking:table:12", "guest 7", lease.Fence())
	})
	switch {
	case errors.Is(err, lockkit.ErrFenced):
		log.Printf("our lease was lost and a newer holder has written: %v", err)
	case err != nil:
		log.Fatal(err)
	}

	guest, fence, err := lockkit.FencedGet(ctx, rdb, "booking:table:12")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("table 12 is booked by %s (fence %d)\n", guest, fence)
}

// Guard a SQL row with the lease's fence. The table needs a fence column
// once:
//
//	ALTER TABLE bookings ADD COLUMN fence bigint;
func ExampleFencedTable_Update() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	bookings := lockkit.FencedTable{Table: "bookings", KeyColumn: "id"}

	var table12 lockkit.Lock // from generated code: locks.Table("12")
	err = table12.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		// ... other writes of the booking, in the same transaction ...
		err = bookings.Update(ctx, tx, "12", lease.Fence(),
			lockkit.Column{Name: "guest", Value: "guest 7"},
			lockkit.Column{Name: "booked_at", Value: time.Now()})
		if err != nil {
			return err // ErrFenced: roll everything back
		}
		return tx.Commit()
	})
	if errors.Is(err, lockkit.ErrFenced) {
		log.Printf("our lease was lost and a newer holder has written: %v", err)
	}
}

// Statement gives the conditional UPDATE to run yourself, e.g. with a
// pgxpool.Pool: zero rows affected means the row is missing or its fence is
// above ours.
func ExampleFencedTable_Statement() {
	bookings := lockkit.FencedTable{Table: "bookings", KeyColumn: "id"}
	query, args, err := bookings.Statement("12", 1795316552359147, lockkit.Column{Name: "guest", Value: "guest 7"})
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
