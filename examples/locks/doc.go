// Package locks holds the typed lock helpers of the repository's
// lockkit.yaml: one constructor per lock domain (Table, UserDigest, Cron,
// Job), each returning a lock whose Do, TryDo, Acquire and TryAcquire come
// from lockkit.Lock.
//
// locks_gen.go is generated; edit ../../lockkit.yaml instead and run
// go generate in this directory. The generator's tests fail while the
// committed file is stale.
//
// Reach the helpers either through a value, for dependency injection and
// tests:
//
//	l := locks.New(client)
//	err := l.Table(id).Do(ctx, fn)
//
// or through the package-level helpers, after binding them once:
//
//	locks.SetDefault(client)
//	err := locks.Table(id).Do(ctx, fn)
package locks

//go:generate go run github.com/lockkit/lockkit/cmd/lockkit-gen -config ../../lockkit.yaml -out locks_gen.go
