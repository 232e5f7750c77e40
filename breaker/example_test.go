package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// A client whose breakers open after three failures in a row and probe again
// after five seconds. A lock refused by an open breaker fails at once with
// lockkit.ErrUnavailable, and the *OpenError in it says which node and for
// how much longer.
func ExampleSettings() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithBreaker(breaker.Settings{
		ConsecutiveFailures: 3,
		OpenTimeout:         5 * time.Second,
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())

	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 30 * time.Second}})
	err = jobs.Key(8).Literal("job:").String("42").Lock().TryDo(context.Background(), func(ctx context.Context, lease *lockkit.Lease) error {
		return nil
	})
	var open *breaker.OpenError
	if errors.As(err, &open) {
		fmt.Printf("%s is failing: not sending to it for another %v\n", open.Name, open.RetryAfter)
	}
}
