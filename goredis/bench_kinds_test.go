package goredis_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/benchkit"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// BenchmarkSemaphoreAcquireRelease: one uncontended permit of a 3-permit
// semaphore, TryAcquire + Release through the Client, against the floor a
// hand-written permit costs on Redis (SET permit-key token NX PX, then an
// EVALSHA compare-and-delete: what one permit on one slot key needs), paired
// iteration by iteration (internal/benchkit.Paired):
//
//	go test ./goredis -run '^$' -bench SemaphoreAcquireRelease -benchtime 3000x -count 3
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	testserver.RequireRedis(b)
	rdb := testserver.StartRedis(b).Client(b)
	ctx := context.Background()
	del := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	c := newBenchClient(b, rdb)
	sem := c.Domain(lockkit.DomainSpec{Name: "bench-sem", Policy: lockkit.Policy{TTL: 10 * time.Second, Kind: "semaphore", Permits: 3}}).
		Key(16).Literal("bench-sem").Semaphore()
	benchkit.Paired(b,
		benchkit.Op{Name: "floor", Do: func() error {
			tok := rand.Text()
			if err := rdb.SetNX(ctx, "floor:{sem}:permit:0", tok, 10*time.Second).Err(); err != nil {
				return err
			}
			return del.Run(ctx, rdb, []string{"floor:{sem}:permit:0"}, tok).Err()
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

// BenchmarkElectionTakeover: the time from killing a leader (its go-redis
// client closed: no resign, no renewal) to a standby's next term, at a 500 ms
// TTL (internal/benchkit.Takeover):
//
//	go test ./goredis -run '^$' -bench ElectionTakeover -benchtime 5x -count 2
func BenchmarkElectionTakeover(b *testing.B) {
	testserver.RequireRedis(b)
	r := testserver.StartRedis(b)
	const ttl = 500 * time.Millisecond
	standby := newBenchClient(b, r.Client(b), benchkit.CommandTimeout(ttl))
	benchkit.Takeover(b, ttl, standby, func() benchkit.Client {
		rdb := r.Client(b)
		return benchkit.Client{C: newBenchClient(b, rdb, benchkit.CommandTimeout(ttl)), Kill: rdb.Close}
	})
}

func newBenchClient(b *testing.B, rdb redis.UniversalClient, opts ...lockkit.Option) *lockkit.Client {
	b.Helper()
	c, err := lockkit.New(goredis.New(rdb), append([]lockkit.Option{lockkit.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}
