// Package fence enforces fencing numbers at the protected resource.
//
// Fencing numbers only help if the protected resource checks them. A lease
// can be lost without its holder noticing in time: the process pauses (GC,
// SIGSTOP, a slow disk) past the TTL, the key expires, another client takes
// the lock and writes; then the first one wakes up and writes too. Every
// acquisition of a fencing domain returns a number higher than all earlier
// ones for that key (lockkit.Lease.Fence), so the resource can keep the
// highest number it has accepted and turn away any write that carries a
// lower one.
//
// For a value in Redis, [Set] and [Get] keep the value and the highest fence
// together in one hash, checked and written by one script. For a row in SQL,
// [Table] builds the one UPDATE that checks and writes the fence column in
// the same statement. Either turns a late write away with an [*Error] that
// matches [ErrFenced], and writes nothing.
//
// The package does not depend on the lock runtime: the resource may live in
// another service, which imports only this package.
package fence
