// Command worker is the v0.1.0 side of the cross-version test
// (internal/crossver): it is copied into a tree extracted at the release
// commit and built there, against that release's public API
// (lockkit.New(lockkit.Redis(rdb)), postgres.Backend(pool)). It takes the
// lock -n times and records each critical section at the resource, with a
// fence check, exactly as the new side (crossver_test.go's work) does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

func main() {
	store := flag.String("store", "redis", "redis or pg")
	addr := flag.String("addr", "", "Redis address (the lock store and, for -store redis, the resource)")
	dsn := flag.String("dsn", "", "PostgreSQL DSN (-store pg: the lock store and the resource)")
	key := flag.String("key", "k", "the lock's key parameter")
	wait := flag.String("wait", "poll", "poll or fifo")
	n := flag.Int("n", 10, "critical sections")
	who := flag.String("who", "old", "the name recorded at the resource")
	flag.Parse()
	if err := run(*store, *addr, *dsn, *key, *wait, *n, *who); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	fmt.Println("done")
}

func run(store, addr, dsn, key, wait string, n int, who string) error {
	ctx := context.Background()
	var (
		b    lockkit.Backend
		rdb  *redis.Client
		pool *pgxpool.Pool
	)
	switch store {
	case "redis":
		rdb = redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		b = lockkit.Redis(rdb)
	case "pg":
		var err error
		if pool, err = pgxpool.New(ctx, dsn); err != nil {
			return err
		}
		defer pool.Close()
		b = postgres.Backend(pool)
	default:
		return fmt.Errorf("-store %q: want redis or pg", store)
	}
	client, err := lockkit.New(b)
	if err != nil {
		return err
	}
	defer client.Close(ctx)
	p := lockkit.Policy{TTL: 5 * time.Second, Fencing: true, Retry: lockkit.RetryPolicy{
		MaxAttempts: 100000, InitialInterval: 2 * time.Millisecond, MaxInterval: 20 * time.Millisecond, MaxWait: 30 * time.Second}}
	if wait == "fifo" {
		p.Wait = lockkit.WaitFIFO
	}
	d := client.Domain(lockkit.DomainSpec{Name: "crossver", Pattern: "crossver:{key}", Policy: p})
	lock := d.Key(32).Literal("crossver:").String(key).Lock()
	for range n {
		err := lock.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
			f := lease.Fence()
			if err := record(ctx, rdb, pool, key, who, "B", f); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
			return record(ctx, rdb, pool, key, who, "E", f)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// record writes one event of a critical section at the resource: a fenced
// write (refused when a higher fence was seen) and a log entry. The schema
// is the test's (crossver_test.go).
func record(ctx context.Context, rdb *redis.Client, pool *pgxpool.Pool, key, who, ev string, f int64) error {
	entry := fmt.Sprintf("%s %s %d", ev, who, f)
	if rdb != nil {
		if err := fence.Set(ctx, rdb, "res:"+key, entry, f); err != nil {
			return err
		}
		return rdb.RPush(ctx, "res:"+key+":log", entry).Err()
	}
	tag, err := pool.Exec(ctx, `UPDATE crossver_res SET fence = $2 WHERE k = $1 AND fence <= $2`, key, f)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("fenced: %s refused at the resource", entry)
	}
	_, err = pool.Exec(ctx, `INSERT INTO crossver_log (k, who, ev, fence) VALUES ($1, $2, $3, $4)`, key, who, ev, f)
	return err
}
