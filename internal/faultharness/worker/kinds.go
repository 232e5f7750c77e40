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

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/faultharness"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// stopNext is stopAt's value for "before the next write, to any row".
const stopNext = "next"

// kindWorker is a worker of a mode other than redis.
type kindWorker struct {
	*worker
	client *lockkit.Client
	pool   *pgxpool.Pool // mode pg, pgtx: the lock server (and the resource's server)
	locks  []lockkit.Lock
	rows   []string // the rows written; rows[i] is guarded by locks[i] (doall), or rows[0] by locks[0]
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
		cfg.MaxConns = 4
		cfg.ConnConfig.ConnectTimeout = time.Second
		if kw.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			return nil, nil, err
		}
		closers = append(closers, kw.pool.Close)
		kw.client, err = lockkit.New(postgres.New(kw.pool, postgres.WithMaxHeld(2)),
			lockkit.WithLogger(log),
			lockkit.WithCommandTimeout(*cmdTO),
			lockkit.WithBreaker(breaker.Settings{OpenTimeout: 200 * time.Millisecond}),
		)
	case "fifo":
		// The README's client configuration (go-redis's default retries).
		rdb := redis.NewClient(&redis.Options{Addr: *lockRedis, ContextTimeoutEnabled: true})
		closers = append(closers, func() { rdb.Close() })
		kw.client, err = newLockClient(rdb, log)
		if *id%2 == 1 && *mutate == "nofifo" {
			// Broken on purpose: odd workers poll instead of queueing.
		} else {
			pol.Wait = "fifo"
			pol.Retry.MaxWait = 5 * time.Second
		}
	case "doall":
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*lockCluster, ","), ContextTimeoutEnabled: true})
		closers = append(closers, func() { rdb.Close() })
		kw.client, err = newLockClient(rdb, log)
	default:
		return nil, nil, fmt.Errorf("-mode %q: want redis, pg, pgtx, fifo or doall", *mode)
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	d := kw.client.Domain(lockkit.DomainSpec{Name: "harness", Prefix: "lock:", Policy: pol})
	for _, k := range strings.Split(*keys, ",") {
		kw.locks = append(kw.locks, d.Key(len(k)+2).Literal(k).Lock())
	}
	if *mode != "doall" {
		kw.locks = kw.locks[:1]
		kw.rows = kw.rows[:1]
	} else if len(kw.locks) != len(kw.rows) {
		closeAll()
		return nil, nil, fmt.Errorf("-keys %q and -rows %q: one row per key", *keys, *rows)
	}
	return kw, closeAll, nil
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
	var tok string
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
		return nil
	})
	kw.doneEvent(tok, err)
}

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
	if *mutate == "nofence" {
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
