package lockkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

// Two accounts' locks held together, passed in either order: DoAll sorts
// them, so two transfers in opposite directions cannot deadlock.
func ExampleDoAll() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	accounts := client.Domain(lockkit.DomainSpec{Name: "account", Policy: lockkit.Policy{TTL: 10 * time.Second, Fencing: true}})
	from := accounts.Key(16).Literal("account:").String("alice").Lock()
	to := accounts.Key(16).Literal("account:").String("bob").Lock()

	err = lockkit.DoAll(ctx, func(ctx context.Context, set *lockkit.LeaseSet) error {
		for _, lease := range set.Leases() { // in canonical order
			fmt.Println("holding", lease.Key())
		}
		fmt.Println("each fenced key has its own fence:", set.Fence(from) > 0 && set.Fence(to) > 0 && set.Fence(from) != set.Fence(to))
		return nil
	}, to, from)
	fmt.Println("DoAll:", err)
	// Output:
	// holding lock:{account:alice}
	// holding lock:{account:bob}
	// each fenced key has its own fence: true
	// DoAll: <nil>
}

// Check the lease on the clock right before a side effect: Err is an error
// matching ErrLockLost once the lease's deadline has passed, even if no
// background goroutine has noticed yet (a paused process). The fence still
// protects the write that follows the check.
func ExampleLease_Err() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 10 * time.Second}})

	err = jobs.Key(8).Literal("job:").String("42").Lock().Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		if err := lease.Err(); err != nil {
			return err // lost: do not write
		}
		fmt.Println("still held, valid:", lease.Valid())
		return nil
	})
	fmt.Println("Do:", err, errors.Is(err, lockkit.ErrLockLost))
	// Output:
	// still held, valid: true
	// Do: <nil> false
}

// Domains written by hand register themselves, so that New can refuse a
// LOCKKIT_TTL_* override that names none of them. Generated code does this in
// its init function.
func ExampleRegisterDomains() {
	rdb, stop := exampleRedis()
	defer stop()
	lockkit.RegisterDomains(lockkit.DomainSpec{Name: "report"})

	os.Setenv("LOCKKIT_TTL_REPROT", "45s") // a typo of LOCKKIT_TTL_REPORT
	defer os.Unsetenv("LOCKKIT_TTL_REPROT")
	_, err := lockkit.New(goredis.New(rdb))
	fmt.Println("mistyped override refused:", err != nil && strings.Contains(err.Error(), "LOCKKIT_TTL_REPROT names no lock domain"))
	// Output: mistyped override refused: true
}

// Redlock over three independent Redis servers: a lease is granted once a
// majority took the key. The generated helpers do not change.
func ExampleRedlock() {
	ctx := context.Background()
	n0, stop0 := exampleRedis()
	defer stop0()
	n1, stop1 := exampleRedis()
	defer stop1()
	n2, stop2 := exampleRedis()
	defer stop2()
	// A node votes only once one TTL has passed since its start (or the
	// loss of its data); new nodes that never served a lock are marked
	// (docs/deployments.md, "A new Redlock node").
	markNewRedlockNode(ctx, n0)
	markNewRedlockNode(ctx, n1)
	markNewRedlockNode(ctx, n2)
	client, err := lockkit.New(goredis.Redlock(n0, n1, n2))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	crons := client.Domain(lockkit.DomainSpec{Name: "cron", Policy: lockkit.Policy{TTL: 10 * time.Second}})
	err = crons.Key(16).Literal("cron:").String("nightly").Lock().TryDo(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println("running the nightly job under", lease.Key())
		return nil
	})
	fmt.Println("TryDo:", err)
	// Output:
	// running the nightly job under lock:{cron:nightly}
	// TryDo: <nil>
}
