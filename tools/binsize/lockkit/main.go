// Command lockkit is the smallest program that links lockkit's runtime: a
// go-redis client and lockkit.New. scripts/binsize.sh compares its size with
// ../redislock, the same program over github.com/bsm/redislock.
package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if _, err := lockkit.New(goredis.New(rdb)); err != nil {
		panic(err)
	}
}
