// Package zkhook gives lockkit's own tests and fault harness what package
// zookeeper does not export to users: a backend whose session timeout is the
// TTL on an ensemble whose timing is not declared. Their histories (the
// holder paused, stopped or killed past a session timeout of one TTL) were
// written for it; zookeeper.New refuses that setup to users, since a
// follower that fails right after answering a renewal can then free a lock
// whose lease is valid (zookeeper's TestFollowerFailsAfterExtend).
package zkhook

// WithoutEnsembleTiming returns that option, a zookeeper.Option: package
// zookeeper sets it when it is initialized.
var WithoutEnsembleTiming func() any
