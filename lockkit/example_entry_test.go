package lockkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/telemetry"
)

// One Client per process, on one backend, closed on shutdown.
func ExampleNew() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	client, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner("booking-api"))
	if err != nil {
		log.Fatal(err) // a refused option or environment override, with the reason
	}
	defer client.Close(ctx)
	fmt.Println("ping:", client.Ping(ctx))
	// Output:
	// ping: <nil>
}

// New refuses what it cannot run, here a TTL override that names no domain
// of this program, instead of failing later at the first lock.
func ExampleNew_refused() {
	rdb, stop := exampleRedis()
	defer stop()
	os.Setenv("LOCKKIT_TTL_TABEL", "30s") // mistyped
	defer os.Unsetenv("LOCKKIT_TTL_TABEL")

	_, err := lockkit.New(goredis.New(rdb))
	fmt.Println(err != nil && strings.Contains(err.Error(), "LOCKKIT_TTL_TABEL names no lock domain"))
	// Output:
	// true
}

// Any go-redis client: a single node, a Sentinel failover client, or a
// Cluster client, each master of which gets its own circuit breaker.
func ExampleRedis() {
	sentinel := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "locks",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
	})
	client, err := lockkit.New(goredis.New(sentinel))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
}

// Client.Domain binds a domain's policy to the client once; its locks are
// cheap values built per key.
func ExampleClient_Domain() {
	rdb, stop := exampleRedis()
	defer stop()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())

	accounts := client.Domain(lockkit.DomainSpec{
		Name:    "account",
		Pattern: "account:{id}",
		Policy:  lockkit.Policy{TTL: 5 * time.Second, Retry: lockkit.Retry{Attempts: 10, MaxWait: 2 * time.Second}},
	})
	fmt.Println(accounts.Key(16).Literal("account:").String("a:b{c}").Lock().Key())
	// Output:
	// lock:{account:a%3Ab%7Bc%7D}
}

// Close cancels running work with ErrClosed, waits for it within ctx, and
// releases every lease the client still holds.
func ExampleClient_Close() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	crons := client.Domain(lockkit.DomainSpec{Name: "cron", Policy: lockkit.Policy{TTL: time.Minute}})
	lease, err := crons.Key(8).Literal("nightly").Lock().Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}

	shutdown, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println("close:", client.Close(shutdown))
	fmt.Println("key left in Redis:", rdb.Exists(ctx, lease.Key()).Val())
	// Output:
	// close: <nil>
	// key left in Redis: 0
}

// Ping checks that the backend answers, through the breakers: a readiness
// probe. Client.Health says more (each node's breaker).
func ExampleClient_Ping() {
	rdb, stop := exampleRedis()
	defer stop()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fmt.Println(client.Ping(ctx))
	// Output:
	// <nil>
}

// Acquire returns a lease that outlives ctx and is renewed in the background
// until Release: for work that does not fit in one function call. Watch
// lease.Done, or check lease.Err before each step.
func ExampleLock_Acquire() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 30 * time.Second, Fencing: true}})

	lease, err := jobs.Key(8).Literal("job:").String("7").Lock().Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	for step := range 3 {
		if err := lease.Err(); err != nil {
			fmt.Println("stop:", err) // lost: stop before the next step
			return
		}
		_ = step // ... one step of the job, writing with lease.Fence() ...
	}
	fmt.Println("done, fence issued:", lease.Fence() > 0)
	// Output:
	// done, fence issued: true
}

// TryAcquire makes one attempt: a held lock is ErrNotAcquired at once.
func ExampleLock_TryAcquire() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	crons := client.Domain(lockkit.DomainSpec{Name: "cron", Policy: lockkit.Policy{TTL: time.Minute}})
	nightly := crons.Key(8).Literal("nightly").Lock()

	first, err := nightly.TryAcquire(ctx)
	fmt.Println("first replica:", err)
	_, err = nightly.TryAcquire(ctx)
	fmt.Println("second replica skips:", errors.Is(err, lockkit.ErrNotAcquired))
	fmt.Println("release:", first.Release(ctx))
	// Output:
	// first replica: <nil>
	// second replica skips: true
	// release: <nil>
}

// Release deletes the key only if it still holds this lease's token: a lease
// that lapsed cannot free the next holder's lock.
func ExampleLease_Release() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 30 * time.Second}})
	lease, err := jobs.Key(8).Literal("job:1").Lock().Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}

	rdb.Set(ctx, lease.Key(), "someone-else", time.Minute) // the key changed hands
	err = lease.Release(ctx)
	fmt.Println("not ours any more:", errors.Is(err, lockkit.ErrNotHeld))
	fmt.Println("their lock stands:", rdb.Get(ctx, lease.Key()).Val())
	// Output:
	// not ours any more: true
	// their lock stands: someone-else
}

// Extend renews the lease now, on top of the background renewal: before a
// step that must not start on a lease close to its deadline.
func ExampleLease_Extend() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 30 * time.Second}})
	lease, err := jobs.Key(8).Literal("job:2").Lock().Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	before := lease.Deadline()
	time.Sleep(5 * time.Millisecond)
	fmt.Println("extend:", lease.Extend(ctx))
	fmt.Println("deadline moved:", lease.Deadline().After(before))
	// Output:
	// extend: <nil>
	// deadline moved: true
}

// TryDoAll takes every lock of the set in one attempt, or none: a seat swap
// that finds either seat held is skipped, and nothing stays held.
func ExampleTryDoAll() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	seats := client.Domain(lockkit.DomainSpec{Name: "seat", Policy: lockkit.Policy{TTL: 10 * time.Second}})
	s1 := seats.Key(8).Literal("seat:").String("1A").Lock()
	s2 := seats.Key(8).Literal("seat:").String("1B").Lock()

	held, err := s2.Acquire(ctx) // someone is moving 1B
	if err != nil {
		log.Fatal(err)
	}
	err = lockkit.TryDoAll(ctx, func(ctx context.Context, set *lockkit.LeaseSet) error {
		fmt.Println("swapping") // not reached
		return nil
	}, s1, s2)
	fmt.Println("skipped:", errors.Is(err, lockkit.ErrNotAcquired))
	fmt.Println("1A left free:", rdb.Exists(ctx, s1.Key()).Val() == 0)
	_ = held.Release(ctx)
	// Output:
	// skipped: true
	// 1A left free: true
}

// Breakers per node: after three failures in a row a node is not sent to for
// five seconds, and its locks fail at once with ErrUnavailable.
func ExampleWithBreaker() {
	rdb, stop := exampleRedis()
	defer stop()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithBreaker(breaker.Settings{
		ConsecutiveFailures: 3,
		OpenTimeout:         5 * time.Second,
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	for _, node := range client.Health(context.Background()).Breakers {
		fmt.Println(node.State)
	}
	// Output:
	// closed
}

// A command timeout bounds each round trip, and a renewal must fit in the
// time the renew interval leaves: a 200ms TTL is refused with the default
// timeout (500ms) and works with a 50ms one.
func ExampleWithCommandTimeout() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	spec := lockkit.DomainSpec{Name: "tick", Policy: lockkit.Policy{TTL: 200 * time.Millisecond}}
	for _, timeout := range []time.Duration{500 * time.Millisecond, 50 * time.Millisecond} {
		client, err := lockkit.New(goredis.New(rdb), lockkit.WithCommandTimeout(timeout))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("timeout %v: domain refused: %v\n", timeout, client.Domain(spec).Err() != nil)
		client.Close(ctx)
	}
	// Output:
	// timeout 500ms: domain refused: true
	// timeout 50ms: domain refused: false
}

// Keys that carry personal data are recorded hashed on spans: searchable with
// telemetry.HashKey, not readable.
func ExampleWithKeyMode() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	secret := []byte("from-your-secret-store")
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithTracerProvider(tp),
		lockkit.WithKeyMode(telemetry.KeyHashed, secret))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	users := client.Domain(lockkit.DomainSpec{Name: "user", Policy: lockkit.Policy{TTL: time.Second}})
	lock := users.Key(24).Literal("user:").String("ana@example.com").Lock()
	_ = lock.Do(ctx, func(context.Context, *lockkit.Lease) error { return nil })

	for _, s := range spans.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == telnames.AttrKey && s.Name == "lockkit.hold user" {
				fmt.Println("hashed:", a.Value.AsString() == telemetry.HashKey(lock.Key(), secret))
			}
		}
	}
	// Output:
	// hashed: true
}

// Lost leases, failed releases and breaker changes that no caller sees as an
// error are logged; telemetry.NewLogHandler stamps them with trace ids.
func ExampleWithLogger() {
	rdb, stop := exampleRedis()
	defer stop()
	logger := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
}

// Metrics from a provider of the application's own (by default the global
// one, as set by otelsetup.Setup).
func ExampleWithMeterProvider() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: time.Second}})
	_ = jobs.Key(8).Literal("job:3").Lock().Do(ctx, func(context.Context, *lockkit.Lease) error { return nil })

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telnames.MetricAcquireDuration {
				fmt.Println(m.Name, m.Unit)
			}
		}
	}
	// Output:
	// lockkit.acquire.duration s
}

// The owner name is recorded with every lock the client takes, beside the
// host and pid, and `lockkit inspect` shows it as the holder.
func ExampleWithOwner() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner("billing-worker-2"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: time.Second}})
	_ = jobs.Key(8).Literal("job:4").Lock().Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println(strings.Contains(rdb.Get(ctx, lease.Key()).Val(), "o=billing-worker-2"))
		return nil
	})
	// Output:
	// true
}

// Spans from a provider of the application's own: a hold span with the
// acquire and release under it, and fn's own spans nested in the hold.
func ExampleWithTracerProvider() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: time.Second}})
	_ = jobs.Key(8).Literal("job:5").Lock().Do(ctx, func(context.Context, *lockkit.Lease) error { return nil })
	for _, s := range spans.GetSpans() {
		fmt.Println(s.Name)
	}
	// Output:
	// lockkit.acquire job
	// lockkit.release job
	// lockkit.hold job
}
