// Package drivertest is the conformance suite of lockkit backends: Run
// drives the real lockkit Client, and the raw backend, over a backend and
// asserts lockkit's runtime contract (docs/semantics.md) as subtests:
//
//   - MutualExclusion: clients with several goroutines each take one key
//     in turn; an overlap counter and a non-atomic counter catch two
//     holders, and fences (where the backend issues them) rise with each.
//   - Contended: a held key is ErrNotAcquired naming the key for a
//     single attempt, and ErrNotAcquired after retries that ran out, never
//     ErrUnavailable; a second Release is ErrNotHeld.
//   - StaleToken: on the raw backend, Release and Extend with a token that
//     does not hold the key answer held=false and change nothing.
//   - Expiry: a holder that stops renewing is replaced after the TTL, not
//     before the Client's deadline for it (TTL − drift), and within a
//     generous bound.
//   - Renewal: a renewed lease outlives its TTL and stays exclusive.
//   - Fences: strictly increasing per key, across clients and expiry (a
//     backend without fences must refuse fencing domains, saying why).
//   - Restart (Stop, Start): a holder learns of the restart
//     (ErrLockLost), the next holder's fence is above the one before.
//   - LostMidFn (Steal): the key is free for others at once, fn's ctx is
//     cancelled with a cause matching ErrLockLost and Do returns
//     ErrLockLost joined with fn's error.
//   - LostAtRelease (Steal): taken and re-taken while fn runs, fn returning
//     before a renewal: Do still reports ErrLockLost, and its release leaves
//     the new holder's lock alone.
//   - CloseDuringDo, CloseTimeout: Close cancels fn with ErrClosed, keeps
//     the lock held until fn returns, then releases it; a Close whose ctx
//     ends first says a lease was left, and Do releases it later.
//   - CloseEndsWaits: a polling Do, a DoAll and (where the backend keeps a
//     FIFO queue) a FIFO Do waiting on locks another client holds end with
//     ErrClosed when their client closes, before their max wait; Close
//     returns nil, and after the holder releases, a third client takes
//     each lock with one attempt (no closed waiter was handed it).
//   - CtxCancelled: before the acquire, while waiting, inside fn.
//   - BadInput: an empty key, a huge key, a TTL under the backend's
//     minimum or not in its unit: a clear error naming the limit.
//   - ServerDown (Stop, Start): ErrUnavailable (with or without retries,
//     and from Ping), the breaker opens and refuses at once
//     (breaker.ErrOpen), health is red; after Start the client takes locks
//     again, health is green, and the breaker went closed->open first and
//     half_open->closed last.
//   - ElectionOneLeader: candidates on several clients each lead a few
//     terms of one election: never two at once, term numbers strictly
//     increasing, Leader naming the running term; nobody leads after.
//   - ElectionHandover: a leader that stops renewing (its key taken on the
//     raw backend, never extended) is succeeded after its TTL, not before
//     its deadline, with a higher term; Observe delivers both terms. A
//     backend without driver.HolderReader must refuse election domains,
//     naming them.
//   - Failover (last): the key's primary changes under a holder (a
//     Sentinel or Cluster failover, a slot migration, a Redlock node
//     restarted empty): nobody else is granted the key while the holder's
//     lease is valid, and fences keep rising. With Harness.Replicas every
//     domain of the suite waits for that many replicas.
//
// A backend's test gives Run a Harness. Hooks it cannot provide stay nil,
// and the subtests that need them are skipped, saying why. With a short
// TTL the suite takes a few seconds per backend, plus the restarts.
//
// A third party's backend (here over a hypothetical store with a test
// server of its own) runs it from its test package:
//
//	package mystore_test
//
//	import (
//		"testing"
//		"time"
//
//		"example.com/mystore"
//		"example.com/mystore/mystoretest"
//		"github.com/lockkit/lockkit/driver"
//		"github.com/lockkit/lockkit/driver/drivertest"
//	)
//
//	func TestConformance(t *testing.T) {
//		srv := mystoretest.Start(t) // a real server, stopped with the test
//		drivertest.Run(t, drivertest.Harness{
//			Name: "mystore",
//			Open: func(t *testing.T) driver.Spec {
//				conn := srv.Dial(t) // closed with t
//				return mystore.New(conn)
//			},
//			TTL:   time.Second,
//			Steal: func(t *testing.T, key string) { srv.Delete(t, key) },
//			Stop:  srv.Stop,
//			Start: srv.Start,
//		})
//	}
package drivertest
