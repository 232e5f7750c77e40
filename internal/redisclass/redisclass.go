// Package redisclass sorts go-redis errors into the driver's vocabulary for
// the Client's circuit breaker: [Mark] marks a Redis reply or client error
// that means the node cannot serve locks now with driver.Failure, and one
// that says nothing about the node (a closed client, an exhausted pool, a
// TRYAGAIN during resharding) with driver.Capacity. Network errors and
// context ends need no mark: internal/circuit recognises them for every
// backend. It is the Redis half of what internal/circuit.Classify decides.
package redisclass

import (
	"errors"
	"strings"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// Mark returns err marked for the breaker, or err itself when it needs no
// mark (nil, redis.Nil, a network error, any other reply a healthy node
// gives).
func Mark(err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	switch {
	case errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolExhausted),
		isTryAgain(err):
		return driver.Capacity(err)
	case errors.Is(err, redis.ErrPoolTimeout),
		isFailureReply(err):
		return driver.Failure(err)
	}
	return err
}

// failureCodes are the error-reply codes (the first word of a Redis error)
// that mean the node cannot serve locks now. Each is matched as a whole
// word, so "BUSY" does not match BUSYKEY or BUSYGROUP.
var failureCodes = [...]string{
	"LOADING",
	"READONLY",
	"MASTERDOWN",
	"CLUSTERDOWN",
	"BUSY",
	"NOREPLICAS",
	"MISCONF",
	"OOM",
}

// isFailureReply reports whether err is a Redis error reply that means the
// node cannot serve. go-redis's typed helpers are used where it has them;
// the rest is matched on the reply's code.
func isFailureReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	if redis.IsLoadingError(re) ||
		redis.IsReadOnlyError(re) || // also the Lua-wrapped "-READONLY" form
		redis.IsMasterDownError(re) ||
		redis.IsClusterDownError(re) ||
		redis.IsNoReplicasError(re) ||
		redis.IsOOMError(re) ||
		redis.IsMaxClientsError(re) ||
		redis.HasErrorPrefix(re, "BUSY ") ||
		redis.HasErrorPrefix(re, "MISCONF ") {
		return true
	}
	return hasWrappedFailureCode(re.Error())
}

// isTryAgain reports a TRYAGAIN reply: a multi-key request during a Cluster
// resharding, while the keys' slot is being migrated. The node is healthy and
// the request fails for a moment only; counting it would let a resharding
// open the breaker of a master that serves every other key.
func isTryAgain(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (redis.IsTryAgainError(re) || strings.Contains(re.Error(), ": -TRYAGAIN "))
}

// scriptErrorPrefix starts the error Redis 6 and older return when a
// redis.call inside a script fails; the inner error follows as
// ": -CODE message".
const scriptErrorPrefix = "ERR Error running script"

func hasWrappedFailureCode(msg string) bool {
	if !strings.HasPrefix(msg, scriptErrorPrefix) {
		return false
	}
	for _, code := range failureCodes {
		if strings.Contains(msg, ": -"+code+" ") {
			return true
		}
	}
	return false
}
