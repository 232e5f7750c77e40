// Command booking is the double-booking race of a restaurant booking service
// run as four replicas: Charlie and Diana both reserve table 12 at the same
// instant, and exactly one of them gets it. Then two ways a lock can go wrong
// without lockkit's guarantees: a holder that stalls past its TTL, then
// writes and releases late (the "stolen lock": the booking store turns its
// write away by its fence), and a holder that crashes and never releases.
//
//	go run ./examples/booking
//
// With DATABASE_URL set it takes its locks, and keeps its bookings, in
// PostgreSQL (see postgres.go); with ETCD_ENDPOINTS set it takes its locks in
// etcd and keeps its bookings in Redis (see etcd.go); with ZOOKEEPER_SERVERS
// set it takes its locks in that ZooKeeper ensemble (see zookeeper.go);
// otherwise, with no REDIS_URL, it runs on an
// embedded in-process Redis; with
// OTEL_EXPORTER_OTLP_ENDPOINT set it sends its traces to Jaeger, otherwise it
// prints a summary of the lock spans.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("booking", run) }

const (
	// writeDelay is the work between reading a table's bookings and writing
	// one (checking the guest, calling the restaurant's system): the window
	// in which two unlocked requests both see the table free.
	writeDelay = 100 * time.Millisecond
	// shortTTL replaces the table domain's 10s TTL for the replicas of the
	// stall and crash scenarios, so that they take a second, not ten.
	shortTTL = 300 * time.Millisecond
)

// run tells the three stories and checks their outcomes: a wrong outcome is
// an error, not just different text.
func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	if os.Getenv(zkServersEnv) != "" {
		return runZooKeeper(ctx, w, env)
	}
	if env.Postgres() {
		return runPostgres(ctx, w, env)
	}
	if exampleenv.EtcdEndpoints() != nil {
		return runEtcd(ctx, w, env)
	}
	db := &database{rdb: env.NewRedis()}
	if err := db.reset(ctx, "12", "13", "7", "3"); err != nil {
		return err
	}
	tr := env.Tracer("github.com/lockkit/lockkit/examples/booking")
	if err := race(ctx, w, env, db, tr); err != nil {
		return err
	}
	if err := stolenLock(ctx, w, env, db, tr); err != nil {
		return err
	}
	return crash(ctx, w, env, db, tr)
}

// race: four replicas get reserve-table-12 requests at the same instant,
// Charlie's click on two of them and Diana's on the other two.
func race(ctx context.Context, w io.Writer, env *exampleenv.Env, db store, tr trace.Tracer) error {
	fmt.Fprintln(w, "\n1. Charlie and Diana reserve table 12 at the same instant, on four replicas")

	// Each replica is its own process in production: its own go-redis pool
	// and lockkit client. replica-1 uses the package-level helpers bound by
	// SetDefault; the others hold a locks.Locks value.
	replicas := make([]*replicaSvc, 4)
	for i := range replicas {
		c, err := newReplica(ctx, env)
		if err != nil {
			return err
		}
		r := &replicaSvc{name: fmt.Sprintf("replica-%d", i+1), db: db}
		if i == 0 {
			locks.SetDefault(c)
			r.table = locks.Table
		} else {
			r.table = locks.New(c).Table
		}
		replicas[i] = r
	}
	defer locks.SetDefault(nil)

	// First the same four requests with no lock, on table 13: the booking
	// code reads, works, then writes, so every request finds the table free.
	// With no lease there is no fence either (0): the control's writes are
	// unguarded, as in code without a lock.
	var unlocked atomic.Int64
	fire(4, func(i int) {
		if ok, _, err := db.book(ctx, "13", guestOf(i), 0); err == nil && ok {
			unlocked.Add(1)
		}
	})
	n13, err := db.count(ctx, "13")
	if err != nil {
		return err
	}
	kept13, _, err := db.booking(ctx, "13")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   without a lock (table 13 as a control): %d requests, %d bookings written over one another (the last, %s's, is kept), %d confirmations sent\n", 4, n13, kept13, unlocked.Load())

	// Now with the lock, on table 12.
	fmt.Fprintln(w, "   with locks.Table(\"12\").Do around the same code: Charlie's click reached replica-1 and replica-3, Diana's replica-2 and replica-4")
	start := time.Now()
	var log exampleenv.Timeline
	results := make([]result, 4)
	fire(4, func(i int) {
		results[i] = replicas[i].reserve(ctx, tr, "12", guestOf(i), start, &log)
	})
	log.Print(w)

	var winners []string
	rejected := 0
	for _, r := range results {
		switch {
		case r.err != nil:
			return fmt.Errorf("%s reserving table 12: %w", r.replica, r.err)
		case r.booked:
			winners = append(winners, r.guest)
		default:
			rejected++
		}
	}
	written, err := db.count(ctx, "12")
	if err != nil {
		return err
	}
	if len(winners) != 1 || written != 1 || rejected != 3 {
		return fmt.Errorf("table 12: %d confirmations (%v), %d bookings written, %d rejections; want exactly one booking", len(winners), winners, written, rejected)
	}
	if kept, _, err := db.booking(ctx, "12"); err != nil || kept != winners[0] || (kept != "Charlie" && kept != "Diana") {
		return fmt.Errorf("table 12 is booked for %q (%v), want %s", kept, err, winners[0])
	}
	fmt.Fprintf(w, "   result: table 12 has exactly 1 booking, for %s; the 3 other requests were rejected.\n", winners[0])
	fmt.Fprintln(w, "   why: the lock makes each request's read-work-write run alone, so only the first finds the table free;")
	fmt.Fprintln(w, "   the others wait their turn (the table domain retries with jittered backoff) and then see the booking.")
	return nil
}

func guestOf(i int) string {
	if i%2 == 0 {
		return "Charlie"
	}
	return "Diana"
}

// fire runs f(0..n-1) on n goroutines released at the same instant, and
// waits for them.
func fire(n int, f func(i int)) {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			f(i)
		})
	}
	close(gate)
	wg.Wait()
}

// replicaSvc is one replica of the booking service.
type replicaSvc struct {
	name  string
	table func(id string) locks.TableLock
	db    store
}

// store is the booking store: Redis lists, or a PostgreSQL table.
type store interface {
	// book writes guest's booking of table unless it is booked already,
	// carrying fence (0 for a write under no lease).
	book(ctx context.Context, table, guest string, fence int64) (booked bool, holder string, err error)
	// booking is the booking the store kept for table, and its fence.
	booking(ctx context.Context, table string) (guest string, fence int64, err error)
	count(ctx context.Context, table string) (int64, error)
}

// newReplica is a replica's lockkit client, on the example's backend.
func newReplica(ctx context.Context, env *exampleenv.Env) (*lockkit.Client, error) {
	if os.Getenv(zkServersEnv) != "" {
		return newZooKeeperReplica(env)
	}
	if env.Postgres() {
		c, _, err := env.NewPostgresClient(ctx)
		return c, err
	}
	if eps := exampleenv.EtcdEndpoints(); eps != nil {
		return env.NewEtcdClient(eps)
	}
	return env.NewClient()
}

type result struct {
	replica, guest string
	booked         bool
	err            error
}

// reserve is the request handler: under the table's lock, book the table if
// it is free, with the lease's fence on the write.
func (r *replicaSvc) reserve(ctx context.Context, tr trace.Tracer, table, guest string, start time.Time, log *exampleenv.Timeline) result {
	ctx, span := tr.Start(ctx, "reserve table", trace.WithAttributes(
		attribute.String("table", table), attribute.String("guest", guest), attribute.String("replica", r.name)))
	defer span.End()
	res := result{replica: r.name, guest: guest}
	who := fmt.Sprintf("%-9s  %-7s", r.name, guest)
	err := r.table(table).Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		log.Add(start, "%s  acquired %s (fence %d)", who, lease.Key(), lease.Fence())
		ok, by, err := r.db.book(ctx, table, guest, lease.Fence())
		switch {
		case err != nil:
			return err
		case ok:
			res.booked = true
			log.Add(start, "%s  booked table %s for %s", who, table, guest)
		default:
			log.Add(start, "%s  rejected: table %s is already taken (%s has it)", who, table, by)
		}
		return nil
	})
	switch {
	case errors.Is(err, lockkit.ErrNotAcquired):
		// The table stayed locked through every retry: busy, try again.
		log.Add(start, "%s  rejected: table %s busy (lock held through every retry)", who, table)
	case err != nil:
		res.err = err
	}
	return res
}

// stolenLock: A stalls past its TTL, B takes the lock and books, A wakes up,
// writes and releases late. The store must turn A's write away (its fence is
// older than B's), and the release must not free B's lock.
func stolenLock(ctx context.Context, w io.Writer, env *exampleenv.Env, db *database, tr trace.Tracer) error {
	fmt.Fprintln(w, "\n2. The stolen lock: a paused holder's late write and late release must not undo the next holder's booking")
	fmt.Fprintf(w, "   (replica-A runs with LOCKKIT_TTL_TABLE=%v, the operators' TTL override, so this takes a second, not the schema's 10s)\n", shortTTL)
	ctx, span := tr.Start(ctx, "stolen lock")
	defer span.End()

	freeze := &exampleenv.Freeze{}
	rdbA := env.NewRedis()
	rdbA.AddHook(freeze)
	a, err := withTableTTL(shortTTL, func() (*lockkit.Client, error) { return env.NewClientOn(rdbA, shortTimeout) })
	if err != nil {
		return err
	}
	b, err := env.NewClient()
	if err != nil {
		return err
	}
	c, err := env.NewClient()
	if err != nil {
		return err
	}
	la, lb, lc := locks.New(a), locks.New(b), locks.New(c)

	start := time.Now()
	//lockkit-vet:ignore a scenario step: on an error return the deferred client Close releases it
	leaseA, err := la.Table("7").Acquire(ctx)
	if err != nil {
		return fmt.Errorf("replica-A: %w", err)
	}
	fmt.Fprintf(w, "   %s replica-A  acquired %s (fence %d, TTL %v) and starts a slow booking\n", exampleenv.Stamp(time.Since(start)), leaseA.Key(), leaseA.Fence(), shortTTL)
	freeze.Stop()
	fmt.Fprintf(w, "   %s replica-A  stalls (a long GC pause, a slow query): nothing it sends reaches Redis, renewals included\n", exampleenv.Stamp(time.Since(start)))

	// B's request arrives meanwhile and waits for the lock.
	//lockkit-vet:ignore a scenario step: on an error return the deferred client Close releases it
	leaseB, err := lb.Table("7").Acquire(ctx)
	if err != nil {
		freeze.Resume()
		return fmt.Errorf("replica-B: %w", err)
	}
	fmt.Fprintf(w, "   %s replica-B  acquired %s (fence %d) once Redis expired A's key at its TTL\n", exampleenv.Stamp(time.Since(start)), leaseB.Key(), leaseB.Fence())
	if err := db.write(ctx, "7", "Grace", leaseB.Fence()); err != nil {
		freeze.Resume()
		return fmt.Errorf("replica-B's booking: %w", err)
	}
	fmt.Fprintf(w, "   %s replica-B  booked table 7 for Grace (write with fence %d)\n", exampleenv.Stamp(time.Since(start)), leaseB.Fence())
	// A's runtime gives the lease up at its local deadline, which comes
	// before the key's expiry in Redis; wait for its timer to have run.
	select {
	case <-leaseA.Done():
	case <-time.After(time.Second):
	}
	if !errors.Is(leaseA.Err(), lockkit.ErrLockLost) {
		freeze.Resume()
		return fmt.Errorf("replica-A's lease after its TTL: Err() = %v, want ErrLockLost", leaseA.Err())
	}

	freeze.Resume()
	// A does what a paused holder does: it finishes its work, writing with the
	// fence of the lease it had. The store compares fences, not leases.
	writeErr := db.write(ctx, "7", "Heidi", leaseA.Fence())
	var fenced *fence.Error
	if !errors.As(writeErr, &fenced) || !errors.Is(writeErr, fence.ErrFenced) {
		return fmt.Errorf("replica-A's late booking write (fence %d): %v, want a *fence.Error", leaseA.Fence(), writeErr)
	}
	fmt.Fprintf(w, "   %s replica-A  wakes up and finishes its booking for Heidi: the write is turned away, ErrFenced (its fence %d < the store's %d)\n",
		exampleenv.Stamp(time.Since(start)), fenced.Fence, fenced.Current)
	if kept, fence, err := db.booking(ctx, "7"); err != nil || kept != "Grace" || fence != leaseB.Fence() {
		return fmt.Errorf("after A's late write table 7 is booked for %q with fence %d (%v), want Grace's booking with fence %d", kept, fence, err, leaseB.Fence())
	}
	fmt.Fprintf(w, "   %s replica-A  releases its lease\n", exampleenv.Stamp(time.Since(start)))
	relErr := leaseA.Release(ctx)
	if !errors.Is(relErr, lockkit.ErrNotHeld) {
		return fmt.Errorf("replica-A's late release: %v, want ErrNotHeld", relErr)
	}
	fmt.Fprintf(w, "   %s replica-A  release: ErrNotHeld (%v); nothing deleted\n", exampleenv.Stamp(time.Since(start)), relErr)

	leaseC, errC := lc.Table("7").TryAcquire(ctx)
	if errC == nil {
		defer leaseC.Release(ctx)
	}
	if !errors.Is(errC, lockkit.ErrNotAcquired) {
		return fmt.Errorf("replica-C after A's late release: %v, want ErrNotAcquired (B still holds table 7)", errC)
	}
	value, err := env.NewRedis().Get(ctx, leaseB.Key()).Result()
	if err != nil || !holder.Owns(value, leaseB.Token()) {
		return fmt.Errorf("after A's late release %s holds %q (%v), want B's token", leaseB.Key(), value, err)
	}
	fmt.Fprintf(w, "   %s replica-C  tries table 7: ErrNotAcquired; B's lock survives, its token still in %s\n", exampleenv.Stamp(time.Since(start)), leaseB.Key())
	if err := leaseB.Release(ctx); err != nil {
		return fmt.Errorf("replica-B: %w", err)
	}
	fmt.Fprintf(w, "   %s replica-B  done, releases: ok\n", exampleenv.Stamp(time.Since(start)))
	fmt.Fprintln(w, "   why: the lock alone cannot stop A, which learnt of its lost lease only at its local deadline (ErrLockLost,")
	fmt.Fprintln(w, "   the log line above) and wrote anyway; the store can, because every write carries its lease's fence and")
	fmt.Fprintln(w, "   fence.Set keeps only writes whose fence is at least the highest seen (B's is higher). And release")
	fmt.Fprintln(w, "   is owner-checked, compare token then DEL in one Lua script: a plain DEL would have freed table 7 under B.")
	return nil
}

// crash: a holder dies without releasing; the next request waits for the
// TTL to free the table.
func crash(ctx context.Context, w io.Writer, env *exampleenv.Env, db *database, tr trace.Tracer) error {
	fmt.Fprintln(w, "\n3. Crash: a holder that never releases")
	fmt.Fprintf(w, "   (replica-D runs with LOCKKIT_TTL_TABLE=%v too)\n", shortTTL)
	ctx, span := tr.Start(ctx, "crash")
	defer span.End()

	// A crashed process logs nothing more, so neither does this replica.
	d, err := withTableTTL(shortTTL, func() (*lockkit.Client, error) {
		return env.NewClient(lockkit.WithLogger(discardLogger), shortTimeout)
	})
	if err != nil {
		return err
	}
	e, err := env.NewClient()
	if err != nil {
		return err
	}
	eve := &replicaSvc{name: "replica-E", table: locks.New(e).Table, db: db}

	start := time.Now()
	//lockkit-vet:ignore the crash demo: replica-D dies holding the lease, which expires by its TTL
	leaseD, err := locks.New(d).Table("3").Acquire(ctx)
	if err != nil {
		return fmt.Errorf("replica-D: %w", err)
	}
	if err := env.Crash(d); err != nil {
		return err
	}
	fmt.Fprintf(w, "   %s replica-D  acquired %s (fence %d, TTL %v) for Frank, then crashed before writing: connections gone, no release\n",
		exampleenv.Stamp(time.Since(start)), leaseD.Key(), leaseD.Fence(), shortTTL)

	err = eve.table("3").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil })
	if !errors.Is(err, lockkit.ErrNotAcquired) {
		return fmt.Errorf("replica-E's first try on table 3, held by the crashed replica: %v, want ErrNotAcquired", err)
	}
	left, err := db.rdb.PTTL(ctx, leaseD.Key()).Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   %s replica-E  Eve tries table 3 at once (TryDo): ErrNotAcquired, the dead holder's key has %v to live\n",
		exampleenv.Stamp(time.Since(start)), left.Round(time.Millisecond))

	fmt.Fprintf(w, "   %s replica-E  Eve waits for it (Do, the table domain's retry policy)\n", exampleenv.Stamp(time.Since(start)))
	waitFrom := time.Now()
	var log exampleenv.Timeline
	res := eve.reserve(ctx, tr, "3", "Eve", start, &log)
	waited := time.Since(waitFrom)
	log.Print(w)
	switch {
	case res.err != nil:
		return fmt.Errorf("replica-E reserving table 3: %w", res.err)
	case !res.booked:
		return errors.New("replica-E could not book table 3 after the crashed holder's TTL")
	case waited < left-20*time.Millisecond:
		return fmt.Errorf("replica-E got table 3 after %v, before the crashed holder's key expired (%v left)", waited, left)
	}
	if n, err := db.count(ctx, "3"); err != nil || n != 1 {
		return fmt.Errorf("table 3: %d bookings written (%v), want Eve's only", n, err)
	}
	if kept, _, err := db.booking(ctx, "3"); err != nil || kept != "Eve" {
		return fmt.Errorf("table 3 is booked for %q (%v), want Eve", kept, err)
	}
	fmt.Fprintf(w, "   result: Eve waited %v and got table 3: Redis expired the crashed holder's key at its TTL; nobody had to\n", waited.Round(time.Millisecond))
	fmt.Fprintln(w, "   clean up. The TTL bounds how long a crash blocks a table, which is why every lock has one.")
	return nil
}

// shortTimeout is the command timeout of a client under the short TTL: a
// lease's renewal must be answered before its deadline, and lockkit refuses
// a policy that leaves it no room.
var shortTimeout = lockkit.WithCommandTimeout(100 * time.Millisecond)

// withTableTTL makes a client under LOCKKIT_TTL_TABLE=ttl, the environment
// override that lockkit.New reads once, and puts the variable back.
func withTableTTL(ttl time.Duration, mk func() (*lockkit.Client, error)) (*lockkit.Client, error) {
	const name = "LOCKKIT_TTL_TABLE"
	old, had := os.LookupEnv(name)
	if err := os.Setenv(name, ttl.String()); err != nil {
		return nil, err
	}
	defer func() {
		if had {
			os.Setenv(name, old)
		} else {
			os.Unsetenv(name)
		}
	}()
	return mk()
}

// database is the booking store, on Redis: per table, the booking (a
// fence.Set resource: the guest and the fence it was written with)
// and a log of the bookings written, one per confirmation sent.
type database struct{ rdb *redis.Client }

func bookingKey(table string) string { return "lockkit-example:booking:table:" + table }
func writtenKey(table string) string { return "lockkit-example:booking:written:" + table }

// reset clears the demo's bookings, so that the example can run again on
// the same server.
func (d *database) reset(ctx context.Context, tables ...string) error {
	var keys []string
	for _, t := range tables {
		keys = append(keys, bookingKey(t), writtenKey(t))
	}
	return d.rdb.Del(ctx, keys...).Err()
}

// book books table for guest if nobody has it: read, work, write, in three
// steps. Two requests that run it at the same time both find the table free
// and both write; only a lock around it keeps that from happening. fence is
// the lease's fencing number, which the write carries (see write); 0, for
// the unlocked control only, writes unguarded. It returns whether it booked,
// or who has the table.
func (d *database) book(ctx context.Context, table, guest string, fence int64) (booked bool, holder string, err error) {
	holder, _, err = d.booking(ctx, table)
	switch {
	case err == nil:
		return false, holder, nil
	case !errors.Is(err, redis.Nil):
		return false, "", err
	}
	time.Sleep(writeDelay)
	if err := d.write(ctx, table, guest, fence); err != nil {
		return false, "", err
	}
	return true, guest, nil
}

// write stores the booking with fence.Set: the store keeps it only
// when fenceNo is at least the highest fence it has accepted for the table, so
// a holder whose lease was lost (paused past its TTL, then resumed) is turned
// away with a *fence.Error once the next holder has written. A fence
// number of 0 (no lease) overwrites unguarded.
func (d *database) write(ctx context.Context, table, guest string, fenceNo int64) error {
	if fenceNo == 0 {
		if err := d.rdb.HSet(ctx, bookingKey(table), "value", guest).Err(); err != nil {
			return err
		}
	} else if err := fence.Set(ctx, d.rdb, bookingKey(table), guest, fenceNo); err != nil {
		return err
	}
	return d.rdb.RPush(ctx, writtenKey(table), guest).Err()
}

// booking returns who has table and the fence of that write; an error
// matching redis.Nil when nobody has.
func (d *database) booking(ctx context.Context, table string) (guest string, fence int64, err error) {
	var b struct {
		Guest *string `redis:"value"`
		Fence int64   `redis:"fence"` // 0 after the control's unguarded writes
	}
	if err := d.rdb.HMGet(ctx, bookingKey(table), "value", "fence").Scan(&b); err != nil {
		return "", 0, err
	}
	if b.Guest == nil {
		return "", 0, redis.Nil
	}
	return *b.Guest, b.Fence, nil
}

// count is how many bookings were written for table (each sent a confirmation).
func (d *database) count(ctx context.Context, table string) (int64, error) {
	return d.rdb.LLen(ctx, writtenKey(table)).Result()
}

var discardLogger = slog.New(slog.DiscardHandler)
