// Command worker is one fault-harness worker, a separate OS process that the
// test builds and starts. It loops: take the fenced lock, read both
// resources, work a little, then for each resource check the lease's
// validity and write with the lease's fence. It records every step as JSON
// lines in its history file (one unbuffered write per event, so a SIGKILL
// loses at most the line being written) and exits 0 after SIGTERM.
//
// In mode redis, SIGUSR1 (SIGUSR2) makes it stop itself with SIGSTOP right after the
// validity check of its next write to the Redis (PostgreSQL) resource, before
// sending it: the pause between check and write that only the fence can
// stop. The test resumes it with SIGCONT.
//
// Writes use a context of their own, not the lease's: the harness checks
// that the resource turns a stale write away, so the write must reach it.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/internal/faultharness"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/lockkit"
)

var (
	id          = flag.Int("id", 0, "worker id")
	inc         = flag.Int("inc", 0, "incarnation (restarts of this worker id)")
	sentinel    = flag.String("sentinel", "", "Sentinel address of the lock server")
	master      = flag.String("master", "locks", "Sentinel master name")
	resRedis    = flag.String("res-redis", "", "address of the Redis resource")
	resKey      = flag.String("res-key", "res:booking", "Redis resource key")
	pgDSN       = flag.String("pg", "", "PostgreSQL DSN of the table resource")
	table       = flag.String("table", "bookings", "table of the PostgreSQL resource")
	row         = flag.String("row", "harness", "row key of the PostgreSQL resource")
	histPath    = flag.String("history", "", "history file (JSON lines, appended)")
	logPath     = flag.String("log", os.DevNull, "the lockkit client's log file (appended)")
	ttl         = flag.Duration("ttl", time.Second, "lock TTL")
	cmdTO       = flag.Duration("cmd-timeout", 250*time.Millisecond, "lock command timeout")
	workMax     = flag.Duration("work", 10*time.Millisecond, "most time spent working inside a section")
	mutate      = flag.String("mutate", "", "break the worker on purpose, to see the checker fail: fence-1, nofence, nocheck; nofifo and linger (fifo: write again after the release), onefence (doall), nplus1 (semaphore: one permit more than -permits)")
	mode        = flag.String("mode", "redis", "the kind: redis (Sentinel lock, Redis and PostgreSQL resources), pg, pgtx, fifo, doall, etcd, zk, election, semaphore (kinds.go)")
	lockRedis   = flag.String("lock-redis", "", "modes fifo, election, semaphore: address of the lock server")
	permits     = flag.Int("permits", 2, "mode semaphore: the semaphore's permits")
	lockCluster = flag.String("lock-cluster", "", "mode doall: the lock Cluster's node addresses, comma-separated")
	lockEtcd    = flag.String("lock-etcd", "", "mode etcd: the etcd cluster's client endpoints, comma-separated")
	lockZK      = flag.String("lock-zk", "", "mode zk: the ZooKeeper ensemble's servers, comma-separated")
	keys        = flag.String("keys", "booking", "lock keys (domain prefix lock:), comma-separated; doall takes them all")
	rows        = flag.String("rows", "harness", "rows of -table written, comma-separated: one per key (doall), else the first")
	writeTO     = 2 * time.Second
)

// newLockClient builds the lockkit client. It is the one place that knows
// the constructor's signature. Odd workers on a *redis.Client send their lock
// commands through go-redis's autopipeliner (autopipeline.New), so each
// history mixes both paths under the same faults and checks; not in mode
// fifo, whose queue commands do not ride it and whose nofifo mutation
// makes the odd workers poll.
func newLockClient(rdb redis.UniversalClient, log *slog.Logger) (*lockkit.Client, error) {
	if c, ok := rdb.(*redis.Client); ok && *id%2 == 1 && *mode != "fifo" {
		return newSpecClient(autopipeline.New(c), log)
	}
	return newSpecClient(goredis.New(rdb), log)
}

type history struct {
	mu sync.Mutex
	f  *os.File
}

func (h *history) add(e faultharness.Event) {
	e.W, e.Inc = *id, *inc
	if e.T == 0 {
		e.T = time.Now().UnixNano()
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: history: %v\n", *id, err)
		os.Exit(3)
	}
}

type worker struct {
	h      *history
	lock   lockkit.Lock
	res    *redis.Client
	db     *sql.DB
	tbl    fence.Table
	op     int64
	rng    *rand.Rand
	stopAt atomic.Value // "", redis or pg: where to stop itself next
	cont   chan os.Signal
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", *id, err)
		os.Exit(1)
	}
}

// The worker's signals are caught before its "start" event is written, and
// the harness signals a worker only once that event is in its history
// (startWorker): a SIGUSR1, SIGUSR2 or SIGTERM that came before signal.Notify
// would kill the process by its default action. Signals that come before the
// worker's loop runs wait in these channels.
var (
	sigs = make(chan os.Signal, 4)
	cont = make(chan os.Signal, 1)
)

func run() error {
	signal.Notify(cont, syscall.SIGCONT)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	f, err := os.OpenFile(*histPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	h := &history{f: f}
	h.add(faultharness.Event{Ev: "start", Pid: os.Getpid()})

	// The client's log lines, at every level, go to the -log file, which
	// the harness scans for a raw key in a hashed run (internal/testlog).
	lf, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	log := testlog.FileLogger(lf)
	if *mode != "redis" {
		return runOther(h, log)
	}
	// The lock and resource clients are configured as the README shows users
	// (ContextTimeoutEnabled; go-redis's default retries and timeouts), so
	// every fault runs against the configuration users run.
	lockRDB := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            *master,
		SentinelAddrs:         []string{*sentinel},
		ContextTimeoutEnabled: true,
	})
	defer lockRDB.Close()
	client, err := newLockClient(lockRDB, log)
	if err != nil {
		return err
	}
	d := client.Domain(lockkit.DomainSpec{Name: "harness", Prefix: "lock:", Policy: lockkit.Policy{
		TTL:     *ttl,
		Fencing: true,
		Retry: lockkit.Retry{
			Attempts: 1000, Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond,
			MaxWait: 2 * time.Second,
		},
	}})
	res := redis.NewClient(&redis.Options{Addr: *resRedis, ContextTimeoutEnabled: true})
	defer res.Close()
	db, err := sql.Open("pgx", *pgDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)

	w := &worker{
		h: h, lock: d.Key(7).Literal("booking").Lock(), res: res, db: db,
		tbl: fence.Table{Table: *table, KeyColumn: "id"},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(*id))),
	}
	stopping := w.signals(
		func() { w.stopAt.Store(faultharness.ResRedis) },
		func() { w.stopAt.Store(faultharness.ResPG) },
	)
	for !stopping() {
		w.section()
		time.Sleep(time.Duration(w.rng.Int64N(int64(3 * time.Millisecond))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Close(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: close: %v\n", *id, err)
	}
	h.add(faultharness.Event{Ev: "exit"})
	return nil
}

// runOther runs a mode other than redis (kinds.go): one PostgreSQL table
// resource, the lock set up by setupKind.
func runOther(h *history, log *slog.Logger) error {
	db, err := sql.Open("pgx", *pgDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	w := &worker{
		h: h, db: db,
		tbl: fence.Table{Table: *table, KeyColumn: "id"},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(*id))),
	}
	stopping := w.signals(
		func() { w.stopAt.CompareAndSwap(stopNext, "") }, // the request is withdrawn
		func() { w.stopAt.Store(stopNext) },
	)
	if err := runKind(w, log, stopping); err != nil {
		return err
	}
	h.add(faultharness.Event{Ev: "exit"})
	return nil
}

// signals sets up the worker's signals: SIGCONT for stopSelf, usr1 and usr2
// on SIGUSR1 and SIGUSR2; the func returned reports whether SIGTERM or
// SIGINT came.
func (w *worker) signals(usr1, usr2 func()) func() bool {
	w.stopAt.Store("")
	w.cont = cont
	var stopping atomic.Bool
	go func() {
		for s := range sigs {
			switch s {
			case syscall.SIGUSR1:
				usr1()
			case syscall.SIGUSR2:
				usr2()
			default:
				stopping.Store(true)
			}
		}
	}()
	return stopping.Load
}

// stopSelf records e and stops the process with SIGSTOP. A signal to
// oneself is not stopped on the spot (other threads run on for a moment), so
// it returns only once the SIGCONT has arrived.
func (w *worker) stopSelf(e faultharness.Event) {
	for len(w.cont) > 0 {
		<-w.cont
	}
	w.h.add(e)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	select {
	case <-w.cont:
	case <-time.After(5 * time.Minute):
		fmt.Fprintf(os.Stderr, "worker %d: no SIGCONT within 5m of stopping itself\n", *id)
	}
}

// section is one turn: acquire, read, work, check and write each resource.
func (w *worker) section() {
	var tok string
	err := w.lock.Do(context.Background(), func(ctx context.Context, lease *lockkit.Lease) error {
		tok = lease.Token()
		w.h.add(faultharness.Event{Ev: "grant", Tok: tok, Fence: lease.Fence()})
		w.read(faultharness.ResRedis, tok)
		w.read(faultharness.ResPG, tok)
		time.Sleep(time.Duration(w.rng.Int64N(int64(*workMax) + 1)))
		for _, res := range []string{faultharness.ResRedis, faultharness.ResPG} {
			if err := lease.Err(); err != nil && *mutate != "nocheck" {
				w.h.add(faultharness.Event{Ev: "skip", Res: res, Tok: tok})
				return err
			}
			if w.stopAt.CompareAndSwap(res, "") {
				w.stopSelf(faultharness.Event{Ev: "selfstop", Res: res, Tok: tok, Fence: lease.Fence()})
			}
			if err := w.write(res, tok, lease.Fence()); err != nil {
				return err
			}
		}
		return nil
	})
	w.doneEvent(tok, err)
}

// doneEvent records how Do (DoTx, DoAll) ended, and returns the outcome
// ("" when nothing was acquired).
func (w *worker) doneEvent(tok string, err error) string {
	switch {
	case tok == "" && err != nil:
		out := "other"
		switch {
		case errors.Is(err, lockkit.ErrNotAcquired):
			out = "notacquired"
		case errors.Is(err, lockkit.ErrUnavailable):
			out = "unavailable"
		}
		w.h.add(faultharness.Event{Ev: "acqfail", Out: out, Err: short(err)})
		if out != "notacquired" {
			time.Sleep(20 * time.Millisecond) // do not spin on a sick lock server
		}
		return ""
	case err == nil:
		w.h.add(faultharness.Event{Ev: "done", Tok: tok, Out: "ok"})
		return "ok"
	case errors.Is(err, lockkit.ErrLockLost):
		w.h.add(faultharness.Event{Ev: "done", Tok: tok, Out: "lost", Err: short(err)})
		return "lost"
	default:
		w.h.add(faultharness.Event{Ev: "done", Tok: tok, Out: "error", Err: short(err)})
		return "error"
	}
}

func (w *worker) read(res, tok string) {
	w.op++
	op := w.op
	w.h.add(faultharness.Event{Ev: "call", Op: op, Kind: "read", Res: res, Tok: tok})
	ctx, cancel := context.WithTimeout(context.Background(), writeTO)
	defer cancel()
	var (
		value   string
		fenceNo int64
		err     error
	)
	switch res {
	case faultharness.ResRedis:
		value, fenceNo, err = fence.Get(ctx, w.res, *resKey)
		if errors.Is(err, redis.Nil) {
			value, fenceNo, err = "", 0, nil
		}
	case faultharness.ResPG:
		err = w.db.QueryRowContext(ctx, `SELECT coalesce(guest, ''), coalesce(fence, 0) FROM `+*table+` WHERE id = $1`, *row).Scan(&value, &fenceNo)
	}
	e := faultharness.Event{Ev: "ret", Op: op, Kind: "read", Res: res, Out: "ok", Value: value, Fence: fenceNo}
	if err != nil {
		e.Out, e.Err = "error", short(err)
	}
	w.h.add(e)
}

// write sends one fenced write; it returns the error that ends the section
// (fenced off, or failed).
func (w *worker) write(res, tok string, fenceNo int64) error {
	w.op++
	op := w.op
	switch *mutate {
	case "fence-1":
		fenceNo--
	}
	value := faultharness.EncodeValue(*id, *inc, tok, op)
	w.h.add(faultharness.Event{Ev: "call", Op: op, Kind: "write", Res: res, Tok: tok, Fence: fenceNo, Value: value})
	ctx, cancel := context.WithTimeout(context.Background(), writeTO)
	defer cancel()
	var err error
	switch {
	case *mutate == "nofence" && res == faultharness.ResRedis:
		err = w.res.HSet(ctx, *resKey, "value", value, "fence", fenceNo).Err()
	case *mutate == "nofence":
		_, err = w.db.ExecContext(ctx, `UPDATE `+*table+` SET guest = $1, fence = $2 WHERE id = $3`, value, fenceNo, *row)
	case res == faultharness.ResRedis:
		err = fence.Set(ctx, w.res, *resKey, value, fenceNo)
	default:
		err = w.tbl.Update(ctx, w.db, *row, fenceNo, fence.Column{Name: "guest", Value: value})
	}
	e := faultharness.Event{Ev: "ret", Op: op, Kind: "write", Res: res, Out: "ok"}
	var fe *fence.Error
	switch {
	case err == nil:
	case errors.As(err, &fe) && errors.Is(err, fence.ErrFenced):
		e.Out, e.Cur = "fenced", fe.Current
	default:
		e.Out, e.Err = "error", short(err)
	}
	w.h.add(e)
	return err
}

func short(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
