package lockkit_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

// scopeBackend holds locks for the length of a scope of its own (as
// postgres.DoTx's transaction does): a driver.Backend over a map, to show
// the seam DoOn takes. A real backend talks to a store.
type scopeBackend struct {
	mu   sync.Mutex
	held map[string]string
}

func (b *scopeBackend) Acquire(_ context.Context, r *driver.Request) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.held[r.Key]; ok {
		return 0, driver.ErrContended
	}
	b.held[r.Key] = r.Token
	return 0, nil
}

func (b *scopeBackend) Extend(_ context.Context, key, token string, _ time.Duration) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[key] == token, nil
}

func (b *scopeBackend) Release(_ context.Context, key, token string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[key] != token {
		return false, nil
	}
	delete(b.held, key)
	return true, nil
}

func (b *scopeBackend) Ping(context.Context) error { return nil }
func (b *scopeBackend) Close() error               { return nil }
func (b *scopeBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "scope", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond, NoFences: "a scope backend issues no fences"}
}

// DoOn runs a lock's Do on a backend of the caller's (here one that holds
// the lock for a scope it owns), with the Client's retries, deadlines,
// telemetry and errors. postgres.DoTx is built on it.
func ExampleDoOn() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	orders := client.Domain(lockkit.DomainSpec{Name: "order", Policy: lockkit.Policy{TTL: time.Second}})
	lock := orders.Key(8).Literal("order:7").Lock()
	scope := &scopeBackend{held: map[string]string{}}
	err = lockkit.DoOn(ctx, lock, scope, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println("held in the scope:", scope.held[lease.Key()] == lease.Token())
		return nil
	})
	fmt.Println("err:", err, "left held:", len(scope.held))
	// Output:
	// held in the scope: true
	// err: <nil> left held: 0
}

// On Redis Sentinel or Cluster, a fencing domain that sets no replicas logs
// a warning when it is bound; WithoutReplicaWarning silences it for the
// domains named, where the fence alone is the protection chosen.
func ExampleWithoutReplicaWarning() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithoutReplicaWarning("table"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	tables := client.Domain(lockkit.DomainSpec{Name: "table", Policy: lockkit.Policy{TTL: time.Second, Fencing: true}})
	fmt.Println(tables.Err())
	// Output:
	// <nil>
}
