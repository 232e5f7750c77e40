package locks_test

import (
	"context"
	"errors"
	"log"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

func Example() {
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"})))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	locks.SetDefault(client)

	// Book table 12: the booking write gets the lease's fencing number, so a
	// writer whose lease was lost meanwhile is turned away.
	err = locks.Table("12").Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return book(ctx, "12", lease.Fence())
	})
	if err != nil {
		log.Print(err)
	}

	// Run the hourly reconciliation once per hour across replicas: whoever
	// finds the lock held skips this hour's run.
	hour := time.Now().Unix() / 3600
	err = locks.Cron("reconcile", hour).TryDo(ctx, func(ctx context.Context, _ *lockkit.Lease) error {
		return reconcile(ctx)
	})
	if errors.Is(err, lockkit.ErrNotAcquired) {
		log.Print("another replica runs it")
	}
}

// Example_value shows the explicit form, for dependency injection and tests.
func Example_value() {
	ctx := context.Background()
	client, err := lockkit.New(goredis.New(redis.NewClient(&redis.Options{Addr: "localhost:6379"})))
	if err != nil {
		log.Fatal(err)
	}
	l := locks.New(client)
	err = l.UserDigest(9182).TryDo(ctx, func(ctx context.Context, _ *lockkit.Lease) error {
		return sendDigest(ctx, 9182)
	})
	if errors.Is(err, lockkit.ErrNotAcquired) {
		return // another worker is sending it
	}
}

func book(context.Context, string, int64) error { return nil }
func reconcile(context.Context) error           { return nil }
func sendDigest(context.Context, int64) error   { return nil }

// Without SetDefault the package-level helpers fail with ErrNoClient, and
// never panic or run fn.
func TestHelpersWithoutDefault(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *lockkit.Lease) error {
		t.Error("fn ran without a client")
		return nil
	}
	errs := []error{
		locks.Table("12").Do(ctx, fn),
		locks.UserDigest(9182).TryDo(ctx, fn),
		locks.Cron("reconcile", 480000).Do(ctx, fn),
		locks.Job("j-1").TryDo(ctx, fn),
	}
	for i, err := range errs {
		if !errors.Is(err, lockkit.ErrNoClient) {
			t.Errorf("call %d: %v, want lockkit.ErrNoClient", i, err)
		}
	}
}

// The keys are the schema's patterns under the prefix, in a hash tag.
func TestKeys(t *testing.T) {
	client, err := lockkit.New(goredis.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})))
	if err != nil {
		t.Fatal(err)
	}
	l := locks.New(client)
	for got, want := range map[string]string{
		l.Table("12").Key():               "lock:{table:12}",
		l.UserDigest(9182).Key():          "lock:{user:9182:digest}",
		l.Cron("reconcile", 480000).Key(): "lock:{cron:reconcile:480000}",
		l.Job("a:b").Key():                "lock:{job:a%3Ab}",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
}
