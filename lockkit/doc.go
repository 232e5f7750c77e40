// Package lockkit is the runtime under lockkit's generated lock helpers:
// owner-checked leases on any backend of package driver (Redis through
// package goredis: one node, Sentinel, Cluster or Redlock; PostgreSQL
// through package postgres; or a third party's), background renewal that cancels
// the work's ctx when a lease is lost, jittered exponential backoff, a
// circuit breaker per node, and fencing numbers (enforced at the resource by
// package fence).
//
// Applications normally use the typed helpers generated from lockkit.yaml
// (go run github.com/lockkit/lockkit/cmd/lockkit-gen), which build keys and carry each
// domain's policy:
//
//	err := locks.Table(id).Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
//		return book(ctx, id, lease.Fence())
//	})
//
// # Semantics
//
// Acquire is one atomic step on the backend, which issues the fencing
// number in the same step for a fencing domain. Release and extend compare
// the lease's token before they delete or extend, so a lease that expired
// can never free or prolong someone else's lock (ErrNotHeld).
//
// A lease is valid until start + TTL − drift on this process's monotonic
// clock, start being taken before the acquire was sent and drift 1% of the
// TTL + 2ms. It is extended every Renew (default TTL/3). When an
// extend is refused, or the deadline passes without a successful one (the backend
// unreachable, process paused), the lease is lost: Do cancels fn's ctx with
// an ErrLockLost cause and returns an error matching ErrLockLost.
//
// Contention is ErrNotAcquired, a backend problem ErrUnavailable, and the
// caller's ctx ending is that ctx's error; the three are never confused.
//
// # Generated code and hand-written domains
//
// Generated code uses these names, which applications rarely write themselves:
// DomainSpec (a domain's name, key prefix and Policy), Client.Domain (binds
// it), Domain.Key with its KeyBuilder (builds one key of the domain's
// pattern, escaping each parameter so that keys stay injective), and
// RegisterDomains (declares the program's domains at init, so that New can
// check LOCKKIT_TTL_* variables against them). SupportPackageIsVersion1 is
// the handshake: generated files reference it, and a runtime that cannot
// serve them any more drops it, so a stale file fails to compile. A program
// without the generator declares its domains with the same calls (see the
// examples of Client.Domain and RegisterDomains); the generator writes
// nothing that such a program could not.
package lockkit
