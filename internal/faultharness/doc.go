// Package faultharness is lockkit's system-level fault harness: workers in
// separate OS processes (./worker) take a fenced lock and write to two fenced
// resources (a Redis fence.Set on its own redis-server, a fence.Table on
// PostgreSQL) while the test injects faults: holders paused past their TTL,
// holders killed mid-section, the lock server paused, killed and restarted
// empty, and a Sentinel failover to a replica that missed writes.
//
// The checker reads the servers' own records, not the workers' claims:
//
//   - the lock server's append-only files (every primary's, across
//     data-losing restarts and failovers), where each grant is one
//     MULTI/EXEC holding the lock's SET with the lease token and the fence
//     counter's update: which fence went to which lease;
//   - the Redis resource's append-only file, where each accepted fence.Set
//     is the HSET the script did, in the order the server applied them;
//   - the PostgreSQL resource's log table, appended by a trigger in the same
//     transaction as each accepted update.
//
// The workers' histories (JSON lines) are checked against those records,
// and with porcupine as a fenced register for linearizability.
//
// TestFaultHarness runs that Sentinel-backed Redis lock. TestFaultHarnessKinds
// runs the other kinds from a table (kinds_test.go), each with its worker mode
// (worker/kinds.go): PostgreSQL session locks (pg) and DoTx (pgtx), a FIFO
// domain on Redis (fifo, checked against the queue replayed from the AOF by
// CheckFIFO, and by CheckHeldAt: each accepted write landed while the lock
// server held its lease; a waiter paused while handed the lock, and one
// whose handover pushes arrive late), DoAll over keys on three Cluster
// masters (doall), etcd (its MVCC history is the record of grants;
// CheckQuorumLoss holds it to no grant while two of three members are
// down), ZooKeeper (its members'
// transaction logs, replayed by GrantsFromZKLog), an election on Redis (the
// term is the fence) and a semaphore on Redis (a fenced row per permit slot;
// CheckPermits counts the writers at once in that record); each kind also has a run
// with its workers broken on purpose that the checker must fail.
//
// The package's non-test code is the record formats and the checker, shared
// by the worker and the test; docs/reliability.md has the figures and the
// commands.
package faultharness
