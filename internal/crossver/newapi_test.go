package crossver

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// This file is the new side's only use of the constructors of the public
// API (the backend seam): when they are renamed, this is the one file to
// fix. Everything else the tests use (Client.Domain, Key, Lock.Do,
// Lease.Fence) is the stable surface that generated code calls.

// newClient is a Client of the current tree on rdb (Redis) or, when rdb is
// nil, on pool (PostgreSQL).
func newClient(rdb *redis.Client, pool *pgxpool.Pool, opts ...lockkit.Option) (*lockkit.Client, error) {
	if rdb != nil {
		return lockkit.New(goredis.New(rdb), opts...)
	}
	return lockkit.New(postgres.New(pool), opts...)
}

// migrate creates the PostgreSQL fence table with the current tree.
var migrate = postgres.Migrate

// newRedlockClient is a Client of the current tree on the Redlock nodes.
func newRedlockClient(nodes []redis.UniversalClient, opts ...lockkit.Option) (*lockkit.Client, error) {
	return lockkit.New(goredis.Redlock(nodes...), opts...)
}
