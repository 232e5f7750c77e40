// Command redislock is the baseline for scripts/binsize.sh: the same ten-line
// program as ../lockkit, over github.com/bsm/redislock on the same go-redis.
package main

import (
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if redislock.New(rdb) == nil {
		panic("no client")
	}
}
