// Package seam joins package goredis to goredis/autopipeline without a
// public name: goredis sets WithCommands when it is initialised, and
// autopipeline, which imports goredis, calls it.
package seam

import (
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// WithCommands is goredis.New(rdb) with the single-key commands of a lease
// (acquire without Redlock or replicas, extend, release) sent through the
// Processor that cmds makes when the backend opens. who names the caller in
// errors ("autopipeline.New").
var WithCommands func(who string, rdb *redis.Client, cmds func() (rediswire.Processor, error)) driver.Spec
