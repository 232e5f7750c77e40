package main

// The harness's kinds besides the Sentinel-backed Redis lock (mode redis,
// main.go): each mode takes its lock its own way and writes fenced rows of
// one PostgreSQL table (fence.Table), whose log table is the resource's
// record. Adding a kind is one mode here and one row in the test's table
// (kinds_test.go).
//
//	pg     lockkit.Do on postgres.New: session advisory locks
//	pgtx   postgres.DoTx: the lock and the write commit or roll back together
//	fifo   lockkit.Do on a Redis domain with Policy.Wait = "fifo"
//	doall  lockkit.DoAll over several keys of a Redis Cluster, one row each
//	etcd   lockkit.Do on etcd.New over a 3-member cluster (polling)
//	zk     lockkit.Do on zookeeper.New over a 3-member ensemble (polling)
//	election   Election.Lead on a Redis domain of kind election: each term
//	           writes its row 1-3 times with the term's number as the fence
//	semaphore  Semaphore.Do on a Redis domain of kind semaphore (-permits):
//	           each permit writes the row named by its slot (Lease.Key) twice,
//	           on entry and on exit, with the slot's fence
//
// SIGUSR2 makes the worker stop itself (SIGSTOP) right after the validity
// check of its next write, whichever row it is for; SIGUSR1 withdraws that
// request if it is still pending.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/faultharness"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/internal/zkhook"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
	"github.com/lockkit/lockkit/zookeeper"
)

// stopNext is stopAt's value for "before the next write, to any row".
const stopNext = "next"

// kindWorker is a worker of a mode other than redis.
type kindWorker struct {
	*worker
	client *lockkit.Client
	pool   *pgxpool.Pool // mode pg, pgtx: the lock server (and the resource's server)
	locks  []lockkit.Lock
	rows   []string          // the rows written; rows[i] is guarded by locks[i] (doall), or rows[0] by locks[0]
	elect  lockkit.Election  // mode election
	sem    lockkit.Semaphore // mode semaphore: its permits write the rows named by their keys
}

// setupKind connects a mode's lock client and its locks.
func setupKind(w *worker, log *slog.Logger) (*kindWorker, func(), error) {
	kw := &kindWorker{worker: w, rows: strings.Split(*rows, ",")}
	pol := lockkit.Policy{
		TTL:     *ttl,
		Fencing: true,
		Retry: lockkit.Retry{
			Attempts: 1000, Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond,
			MaxWait: 2 * time.Second,
		},
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var err error
	switch *mode {
	case "pg", "pgtx":
		cfg, perr := pgxpool.ParseConfig(*pgDSN)
		if perr != nil {
			return nil, nil, perr
		}
		// No ConnectTimeout, as the README configures pools: pgxpool opens
		// connections in the background, past an Acquire's context. With a
		// 1s ConnectTimeout, a server loaded to ~45 answered no new session
		// for 40s after pg-pause, no process of it stopped. The likely
		// cause: each attempt given up after 1s left its connection in the
		// server's listen backlog, where the resumed postmaster forks a
		// backend for it, so dead attempts queued ahead of the live ones
		// faster than it served them.
		cfg.MaxConns = 4
		if kw.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			return nil, nil, err
		}
		closers = append(closers, kw.pool.Close)
		kw.client, err = newSpecClient(postgres.New(kw.pool, postgres.WithMaxHeld(2)), log)
	case "fifo", "election", "semaphore":
		// The README's client configuration (go-redis's default retries).
		rdb := redis.NewClient(&redis.Options{Addr: *lockRedis, ContextTimeoutEnabled: true})
		closers = append(closers, func() { rdb.Close() })
		kw.client, err = newLockClient(rdb, log)
		switch {
		case *mode == "election":
			pol.Kind = "election"
		case *mode == "semaphore":
			pol.Kind, pol.Permits = "semaphore", *permits
			if *mutate == "nplus1" {
				pol.Permits++ // broken on purpose: one slot more than the checker allows
			}
		case *id%2 == 1 && *mutate == "nofifo":
			// Broken on purpose: odd workers poll instead of queueing.
		default:
			pol.Wait = "fifo"
			pol.Retry.MaxWait = 5 * time.Second
		}
	case "doall":
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*lockCluster, ","), ContextTimeoutEnabled: true})
		closers = append(closers, func() { rdb.Close() })
		kw.client, err = newLockClient(rdb, log)
	case "etcd":
		cli, cerr := clientv3.New(clientv3.Config{Endpoints: strings.Split(*lockEtcd, ","), DialTimeout: 2 * time.Second})
		if cerr != nil {
			return nil, nil, cerr
		}
		closers = append(closers, func() { cli.Close() })
		// The test cluster's election timeout is 500ms: its minimum lease
		// TTL is 1s (1.5 × 500ms, in whole seconds).
		kw.client, err = newSpecClient(etcd.New(cli, etcd.WithMinTTL(time.Second)), log)
	case "zk":
		// The test ensemble's bounds (testserver: tick 100ms, 200ms..20s).
		// The session timeout is the TTL (internal/zkhook): the
		// histories are written for it, and no fault here fails a follower
		// right after it answered a renewal, the risk that option takes
		// (zookeeper's TestFollowerFailsAfterExtend); a new leader restarts
		// every session's timeout.
		kw.client, err = newSpecClient(zookeeper.New(strings.Split(*lockZK, ","),
			zookeeper.WithSessionTimeouts(200*time.Millisecond, 20*time.Second), zkhook.WithoutEnsembleTiming().(zookeeper.Option)), log)
	default:
		return nil, nil, fmt.Errorf("-mode %q: want redis, pg, pgtx, fifo, doall, etcd, zk, election or semaphore", *mode)
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	d := kw.client.Domain(lockkit.DomainSpec{Name: "harness", Prefix: "lock:", Policy: pol})
	for _, k := range strings.Split(*keys, ",") {
		b := d.Key(len(k) + 2).Literal(k)
		switch *mode {
		case "election":
			kw.elect = b.Election()
		case "semaphore":
			kw.sem = b.Semaphore()
		default:
			kw.locks = append(kw.locks, b.Lock())
		}
	}
	switch *mode {
	case "election", "semaphore":
		kw.rows = kw.rows[:1]
	case "doall":
		if len(kw.locks) != len(kw.rows) {
			closeAll()
			return nil, nil, fmt.Errorf("-keys %q and -rows %q: one row per key", *keys, *rows)
		}
	default:
		kw.locks = kw.locks[:1]
		kw.rows = kw.rows[:1]
	}
	return kw, closeAll, nil
}

// newSpecClient builds the lockkit client over a backend: the one place
// that knows the constructor's options (newLockClient: Redis).
func newSpecClient(spec driver.Spec, log *slog.Logger) (*lockkit.Client, error) {
	return lockkit.New(spec,
		lockkit.WithLogger(log),
		lockkit.WithKeyMode(testlog.KeyMode()),
		lockkit.WithCommandTimeout(*cmdTO),
		lockkit.WithBreaker(breaker.Settings{OpenTimeout: 200 * time.Millisecond}),
	)
}

// res is the resource name of row i: "pg" for a kind with one row, the row's
// name for doall.
func (kw *kindWorker) res(i int) string {
	if len(kw.rows) == 1 {
		return faultharness.ResPG
	}
	return kw.rows[i]
}

func (kw *kindWorker) section() {
	switch *mode {
	case "pgtx":
		kw.sectionTx()
	case "doall":
		kw.sectionAll()
	case "election":
		kw.sectionLead()
	case "semaphore":
		kw.sectionPermit()
	default:
		kw.sectionDo()
	}
}

// beforeWrite is the validity check and the self-stop before a write; it
// returns the error that ends the section.
func (kw *kindWorker) beforeWrite(res, tok string, fenceNo int64, leaseErr func() error) error {
	if err := leaseErr(); err != nil && *mutate != "nocheck" {
		kw.h.add(faultharness.Event{Ev: "skip", Res: res, Tok: tok})
		return err
	}
	if kw.stopAt.CompareAndSwap(stopNext, "") {
		kw.stopSelf(faultharness.Event{Ev: "selfstop", Res: res, Tok: tok, Fence: fenceNo})
	}
	return nil
}

// sectionDo: pg and fifo, lockkit.Do; the write goes through database/sql.
func (kw *kindWorker) sectionDo() {
	var (
		tok     string
		fenceNo int64
	)
	err := kw.locks[0].Do(context.Background(), func(ctx context.Context, lease *lockkit.Lease) error {
		tok = lease.Token()
		kw.h.add(faultharness.Event{Ev: "grant", Tok: tok, Fence: lease.Fence(), Key: kw.locks[0].Key()})
		kw.readRow(nil, faultharness.ResPG, kw.rows[0])
		kw.work()
		if err := kw.beforeWrite(faultharness.ResPG, tok, lease.Fence(), lease.Err); err != nil {
			return err
		}
		if err := kw.writeRow(faultharness.ResPG, kw.rows[0], tok, lease.Fence()); err != nil {
			return err
		}
		kw.h.add(faultharness.Event{Ev: "fnret", Tok: tok})
		fenceNo = lease.Fence()
		return nil
	})
	kw.doneEvent(tok, err)
	if *mutate == "linger" && err == nil {
		// Broken on purpose: write again once the lease is released, as a
		// waiter that took a stale handover push for a grant writes while
		// the lock server has handed the lock on (unfenced, so that it lands).
		time.Sleep(lingerFor)
		_ = kw.writeRow(faultharness.ResPG, kw.rows[0], tok, fenceNo)
	}
}

// lingerFor is how long after its release a worker mutated with linger
// writes again: past the checker's slack (CheckHeldAt).
const lingerFor = 300 * time.Millisecond

// sectionAll: doall, lockkit.DoAll over every key; row i with lease i's fence.
func (kw *kindWorker) sectionAll() {
	var toks []string
	lockers := make([]lockkit.Locker, len(kw.locks))
	for i, l := range kw.locks {
		lockers[i] = l
	}
	err := lockkit.DoAll(context.Background(), func(ctx context.Context, set *lockkit.LeaseSet) error {
		for _, l := range kw.locks {
			lease := set.Lease(l)
			toks = append(toks, lease.Token())
			kw.h.add(faultharness.Event{Ev: "grant", Tok: lease.Token(), Fence: lease.Fence(), Key: l.Key()})
		}
		for i := range kw.rows {
			kw.readRow(nil, kw.res(i), kw.rows[i])
		}
		kw.work()
		for i, l := range kw.locks {
			lease := set.Lease(l)
			f := lease.Fence()
			if *mutate == "onefence" {
				f = set.Lease(kw.locks[0]).Fence() // broken on purpose: one fence for every row
			}
			if err := kw.beforeWrite(kw.res(i), lease.Token(), f, set.Err); err != nil {
				return err
			}
			if err := kw.writeRow(kw.res(i), kw.rows[i], lease.Token(), f); err != nil {
				return err
			}
		}
		kw.h.add(faultharness.Event{Ev: "fnret", Tok: toks[0]})
		return nil
	}, lockers...)
	tok := ""
	if len(toks) > 0 {
		tok = toks[0]
	}
	out := kw.doneEvent(tok, err)
	for _, t := range toks[min(1, len(toks)):] {
		// The set's other leases end with the first's outcome.
		kw.h.add(faultharness.Event{Ev: "setdone", Tok: t, Out: out})
	}
}

// sectionLead: election. One campaign (Lead) and, once elected, one term:
// read the row, then 1-3 times work and write it with the term's number as
// the fence. The campaign gives up after campaignFor (an acqfail).
func (kw *kindWorker) sectionLead() {
	var tok string
	ctx, cancel := context.WithTimeout(context.Background(), campaignFor)
	defer cancel()
	err := kw.elect.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		tok = term.Lease().Token()
		kw.h.add(faultharness.Event{Ev: "grant", Tok: tok, Fence: term.Number(), Key: kw.elect.Key()})
		kw.readRow(nil, faultharness.ResPG, kw.rows[0])
		for range 1 + kw.rng.IntN(3) {
			kw.work()
			if err := kw.beforeWrite(faultharness.ResPG, tok, term.Number(), term.Err); err != nil {
				return err
			}
			if err := kw.writeRow(faultharness.ResPG, kw.rows[0], tok, term.Number()); err != nil {
				return err
			}
		}
		kw.h.add(faultharness.Event{Ev: "fnret", Tok: tok})
		return nil
	})
	kw.doneEvent(tok, err)
}

// campaignFor bounds one campaign: Lead campaigns until elected or its ctx
// ends, and the worker must get back to its loop to see SIGTERM.
const campaignFor = 10 * time.Second

// sectionPermit: semaphore. Take a permit (Semaphore.Do); its slot's row
// (named by Lease.Key) is read, written on entry, and, after the work,
// written again on exit, both with the slot's fence. The resource's record
// then spans each permit's time at the resource.
func (kw *kindWorker) sectionPermit() {
	var tok string
	err := kw.sem.Do(context.Background(), func(ctx context.Context, lease *lockkit.Lease) error {
		tok = lease.Token()
		slot := lease.Key()
		kw.h.add(faultharness.Event{Ev: "grant", Tok: tok, Fence: lease.Fence(), Key: slot})
		kw.readRow(nil, slot, slot)
		for i := range 2 {
			if i == 1 {
				kw.work()
			}
			if err := kw.beforeWrite(slot, tok, lease.Fence(), lease.Err); err != nil {
				return err
			}
			if err := kw.writeRow(slot, slot, tok, lease.Fence()); err != nil {
				return err
			}
		}
		kw.h.add(faultharness.Event{Ev: "fnret", Tok: tok})
		return nil
	})
	kw.doneEvent(tok, err)
}

func (kw *kindWorker) work() {
	time.Sleep(time.Duration(kw.rng.Int64N(int64(*workMax) + 1)))
}

// readRow reads a row through tx (pgtx) or the database/sql pool.
func (kw *kindWorker) readRow(tx pgx.Tx, res, row string) {
	kw.op++
	op := kw.op
	kw.h.add(faultharness.Event{Ev: "call", Op: op, Kind: "read", Res: res})
	ctx, cancel := context.WithTimeout(context.Background(), writeTO)
	defer cancel()
	var (
		value   string
		fenceNo int64
		err     error
	)
	q := `SELECT coalesce(guest, ''), coalesce(fence, 0) FROM ` + *table + ` WHERE id = $1`
	if tx != nil {
		err = tx.QueryRow(ctx, q, row).Scan(&value, &fenceNo)
	} else {
		err = kw.db.QueryRowContext(ctx, q, row).Scan(&value, &fenceNo)
	}
	e := faultharness.Event{Ev: "ret", Op: op, Kind: "read", Res: res, Out: "ok", Value: value, Fence: fenceNo}
	if err != nil {
		e.Out, e.Err = "error", short(err)
	}
	kw.h.add(e)
}

// writeRow is one fenced update of row through database/sql.
func (kw *kindWorker) writeRow(res, row, tok string, fenceNo int64) error {
	kw.op++
	op := kw.op
	if *mutate == "fence-1" {
		fenceNo--
	}
	value := faultharness.EncodeValue(*id, *inc, tok, op)
	kw.h.add(faultharness.Event{Ev: "call", Op: op, Kind: "write", Res: res, Tok: tok, Fence: fenceNo, Value: value})
	ctx, cancel := context.WithTimeout(context.Background(), writeTO)
	defer cancel()
	var err error
	if *mutate == "nofence" || *mutate == "linger" {
		_, err = kw.db.ExecContext(ctx, `UPDATE `+*table+` SET guest = $1, fence = $2 WHERE id = $3`, value, fenceNo, row)
	} else {
		err = kw.tbl.Update(ctx, kw.db, row, fenceNo, fence.Column{Name: "guest", Value: value})
	}
	kw.h.add(writeRet(op, res, err))
	return err
}

func writeRet(op int64, res string, err error) faultharness.Event {
	e := faultharness.Event{Ev: "ret", Op: op, Kind: "write", Res: res, Out: "ok"}
	var fe *fence.Error
	switch {
	case err == nil:
	case errors.As(err, &fe) && errors.Is(err, fence.ErrFenced):
		e.Out, e.Cur = "fenced", fe.Current
	default:
		e.Out, e.Err = "error", short(err)
	}
	return e
}

// sectionTx: pgtx. The update runs in DoTx's transaction, so it is applied
// only if DoTx commits: its answer is recorded when DoTx returns (ok on nil,
// aborted when the transaction surely rolled back, error when the commit's
// outcome is unknown), unless the update itself was fenced off.
func (kw *kindWorker) sectionTx() {
	var (
		tok     string
		pending *faultharness.Event // the write's call, answered after DoTx
	)
	err := postgres.DoTx(context.Background(), kw.pool, kw.locks[0], func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
		tok = lease.Token()
		kw.h.add(faultharness.Event{Ev: "grant", Tok: tok, Fence: lease.Fence(), Key: kw.locks[0].Key()})
		kw.readRow(tx, faultharness.ResPG, kw.rows[0])
		kw.work()
		if err := kw.beforeWrite(faultharness.ResPG, tok, lease.Fence(), lease.Err); err != nil {
			return err
		}
		kw.op++
		op := kw.op
		fenceNo := lease.Fence()
		if *mutate == "fence-1" {
			fenceNo--
		}
		value := faultharness.EncodeValue(*id, *inc, tok, op)
		call := faultharness.Event{Ev: "call", Op: op, Kind: "write", Res: faultharness.ResPG, Tok: tok, Fence: fenceNo, Value: value}
		kw.h.add(call)
		wctx, cancel := context.WithTimeout(context.Background(), writeTO)
		defer cancel()
		if *mutate == "nofence" {
			// Broken on purpose: outside the transaction, without the fence.
			_, err := kw.db.ExecContext(wctx, `UPDATE `+*table+` SET guest = $1, fence = $2 WHERE id = $3`, value, fenceNo, kw.rows[0])
			kw.h.add(writeRet(op, faultharness.ResPG, err))
			if err != nil {
				return err
			}
		} else {
			q, args, err := kw.tbl.Statement(kw.rows[0], fenceNo, fence.Column{Name: "guest", Value: value})
			if err != nil {
				return err
			}
			tag, err := tx.Exec(wctx, q, args...)
			switch {
			case err != nil:
				// The transaction is aborted: the update is not applied.
				kw.h.add(faultharness.Event{Ev: "ret", Op: op, Kind: "write", Res: faultharness.ResPG, Out: "aborted", Err: short(err)})
				return err
			case tag.RowsAffected() == 0:
				var cur int64
				_ = tx.QueryRow(wctx, `SELECT coalesce(fence, 0) FROM `+*table+` WHERE id = $1`, kw.rows[0]).Scan(&cur)
				if cur > fenceNo {
					kw.h.add(faultharness.Event{Ev: "ret", Op: op, Kind: "write", Res: faultharness.ResPG, Out: "fenced", Cur: cur})
					return &fence.Error{Resource: kw.rows[0], Fence: fenceNo, Current: cur}
				}
				kw.h.add(faultharness.Event{Ev: "ret", Op: op, Kind: "write", Res: faultharness.ResPG, Out: "aborted", Err: fmt.Sprintf("no row updated, fence %d", cur)})
				return errors.New("no row updated")
			}
			pending = &call
		}
		kw.h.add(faultharness.Event{Ev: "fnret", Tok: tok})
		return nil
	})
	if pending != nil {
		e := faultharness.Event{Ev: "ret", Op: pending.Op, Kind: "write", Res: pending.Res, Out: "ok"}
		switch {
		case err == nil:
		case errors.Is(err, postgres.ErrCommitUnknown):
			e.Out, e.Err = "error", short(err)
		default:
			e.Out, e.Err = "aborted", short(err)
		}
		kw.h.add(e)
	}
	kw.doneEvent(tok, err)
}

// runKind is run's loop for a mode other than redis.
func runKind(w *worker, log *slog.Logger, stopping func() bool) error {
	kw, closeAll, err := setupKind(w, log)
	if err != nil {
		return err
	}
	defer closeAll()
	for !stopping() {
		kw.section()
		time.Sleep(time.Duration(kw.rng.Int64N(int64(3 * time.Millisecond))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := kw.client.Close(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: close: %v\n", *id, err)
	}
	return nil
}
