// Package goredis is lockkit's backend for Redis, through a go-redis v9
// client: one deployment (a single node, Sentinel through a failover client,
// or a Cluster) with [New], and the Redlock algorithm over independent nodes
// with [Redlock]. (The same as New for a standalone or Sentinel client with
// its lock commands on go-redis's autopipelining, an experimental go-redis
// API, is in package goredis/autopipeline, so that only programs importing
// it compile that API.) Each returns the
// driver.Spec that lockkit.New opens:
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	client, err := lockkit.New(goredis.New(rdb))
//
// The backend runs one atomic step per operation (SET NX PX, or a Lua script
// where fencing, FIFO queues or a set of keys need one), checks the owner's
// token on every extend and release, and sends each lock command at most
// once (go-redis re-sends a command after a network error; a re-sent acquire
// could take a lock twice). It marks its errors for the Client's circuit
// breaker: a reply that means the node cannot serve (LOADING, READONLY,
// MASTERDOWN, …) as a failure, a closed client or an exhausted pool as a
// local shortage. The layout of its keys on the wire is in docs/wire.md.
package goredis
