package lockkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

// exampleSemaphore is a semaphore of three permits, bound by hand as
// generated code does it (locks.PartnerAPI(customer) in an application).
func exampleSemaphore(client *lockkit.Client) lockkit.Semaphore {
	partner := client.Domain(lockkit.DomainSpec{
		Name:    "partner",
		Pattern: "partner:{customer}",
		Policy: lockkit.Policy{TTL: 30 * time.Second, Kind: "semaphore", Permits: 3,
			Retry: lockkit.Retry{Attempts: 100, MaxWait: 10 * time.Second}},
	})
	return partner.Key(12).Literal("partner:").String("acme").Semaphore()
}

// Do holds one of the semaphore's permits while fn runs: at most Permits
// calls are in flight at once. The permit is a lease: fn's ctx is
// cancelled if it is lost, and its fence is per permit (Lease.Key).
func ExampleSemaphore_Do() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	sem := exampleSemaphore(client)

	err = sem.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println("permit of", sem.Key()+":", strings.HasPrefix(lease.Key(), sem.Key()+":permit:"))
		return nil // ... call the partner's API with ctx ...
	})
	fmt.Println("Do:", err)
	// Output:
	// permit of lock:{partner:acme}: true
	// Do: <nil>
}

// TryDo makes one attempt: with every permit held it is ErrNotAcquired and
// fn does not run.
func ExampleSemaphore_TryDo() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	sem := exampleSemaphore(client)
	for range 3 { // three calls in flight elsewhere
		permit, err := sem.Acquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer permit.Release(ctx)
	}
	err = sem.TryDo(ctx, func(context.Context, *lockkit.Lease) error {
		fmt.Println("calling") // not reached
		return nil
	})
	fmt.Println("a fourth call waits its turn:", errors.Is(err, lockkit.ErrNotAcquired))
	// Output:
	// a fourth call waits its turn: true
}

// Acquire returns a permit's lease, renewed until Release.
func ExampleSemaphore_Acquire() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	permit, err := exampleSemaphore(client).Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Release(ctx)
	fmt.Println("holding a permit:", permit.Err() == nil)
	// Output:
	// holding a permit: true
}

// TryAcquire takes a free permit or returns ErrNotAcquired at once.
func ExampleSemaphore_TryAcquire() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	sem := exampleSemaphore(client)
	keys := map[string]bool{}
	for range 3 {
		permit, err := sem.TryAcquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer permit.Release(ctx)
		keys[permit.Key()] = true
	}
	_, err = sem.TryAcquire(ctx)
	fmt.Println("three distinct permits:", len(keys) == 3)
	fmt.Println("a fourth is ErrNotAcquired:", errors.Is(err, lockkit.ErrNotAcquired))
	// Output:
	// three distinct permits: true
	// a fourth is ErrNotAcquired: true
}
