package circuit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/redis/go-redis/v9"
)

// One breaker per backend node; every round trip to the node goes through
// it. The reply, redis.Nil included, comes back unchanged.
func ExampleBreaker_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	b := circuit.New("127.0.0.1:6379", breaker.Settings{OpenTimeout: time.Second})

	ctx := context.Background() // the caller's ctx
	var owner string
	err := b.Do(ctx, func(ctx context.Context) error {
		cmdCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a per-command timeout
		defer cancel()
		var err error
		owner, err = rdb.Get(cmdCtx, "lock:table:42").Result()
		return err
	})
	switch {
	case err == redis.Nil:
		fmt.Println("free")
	case errors.Is(err, breaker.ErrOpen):
		fmt.Println("backend unavailable:", err)
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("held by", owner)
	}
}

func ExampleClassify() {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()

	fmt.Println(circuit.Classify(redis.Nil, live))                // contention
	fmt.Println(circuit.Classify(redis.ErrNoScript, live))        // the runtime falls back to EVAL
	fmt.Println(circuit.Classify(io.EOF, live))                   // connection closed by the server
	fmt.Println(circuit.Classify(context.DeadlineExceeded, live)) // a per-command timeout
	fmt.Println(circuit.Classify(context.Canceled, gone))         // the caller gave up
	// Output:
	// success
	// success
	// failure
	// failure
	// ignored
}
