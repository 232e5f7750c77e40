package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

// etcdTTL is the table domain's TTL for the crash story on etcd: the
// shortest lease etcd keeps with its default election timeout (whole
// seconds, at least 2s), where Redis takes 300ms.
const etcdTTL = 2 * time.Second

// runEtcd tells the stories with the locks in etcd (ETCD_ENDPOINTS): the
// same race, and a crashed holder whose lease the cluster expires at its
// TTL. The bookings stay in the example's Redis (REDIS_URL, or the embedded
// one): the lock service and the protected store are different systems, as
// in production, and the store checks the fence etcd issued (a create
// revision).
func runEtcd(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	fmt.Fprintf(w, "lockkit: taking the locks in etcd at %v (ETCD_ENDPOINTS); the bookings stay in Redis\n", exampleenv.EtcdEndpoints())
	db := &database{rdb: env.NewRedis()}
	if err := db.reset(ctx, "12", "13", "3"); err != nil {
		return err
	}
	tr := env.Tracer("github.com/lockkit/lockkit/examples/booking")
	if err := race(ctx, w, env, db, tr); err != nil {
		return err
	}
	return crashEtcd(ctx, w, env, db, tr)
}

// crashEtcd: a holder dies without releasing. Its lease gets no more
// keep-alives, and etcd deletes its key when the lease expires.
func crashEtcd(ctx context.Context, w io.Writer, env *exampleenv.Env, db *database, tr trace.Tracer) error {
	fmt.Fprintln(w, "\n2. Crash: a holder that never releases")
	fmt.Fprintf(w, "   (replica-D runs with LOCKKIT_TTL_TABLE=%v: etcd counts leases in whole seconds, 2s at least by default)\n", etcdTTL)
	eps := exampleenv.EtcdEndpoints()
	d, err := withTableTTL(etcdTTL, func() (*lockkit.Client, error) {
		return env.NewEtcdClient(eps, lockkit.WithLogger(discardLogger))
	})
	if err != nil {
		return err
	}
	e, err := env.NewEtcdClient(eps)
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
	if err := env.CrashEtcd(d); err != nil {
		return err
	}
	fmt.Fprintf(w, "   %s replica-D  acquired %s (fence %d: its key's create revision, TTL %v) for Frank, then crashed: no keep-alive, no release\n",
		exampleenv.Stamp(time.Since(start)), leaseD.Key(), leaseD.Fence(), etcdTTL)
	err = eve.table("3").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil })
	if !errors.Is(err, lockkit.ErrNotAcquired) {
		return fmt.Errorf("replica-E's first try on table 3, held by the crashed replica: %v, want ErrNotAcquired", err)
	}
	fmt.Fprintf(w, "   %s replica-E  Eve tries table 3 at once (TryDo): ErrNotAcquired\n", exampleenv.Stamp(time.Since(start)))
	// The table domain's retry policy gives up within a second; the lease
	// runs for 2s: Eve's request is retried until it gets the table.
	var log exampleenv.Timeline
	res := eve.reserve(ctx, tr, "3", "Eve", start, &log)
	for res.err == nil && !res.booked && time.Since(start) < 10*time.Second {
		res = eve.reserve(ctx, tr, "3", "Eve", start, &log)
	}
	waited := time.Since(start)
	log.Print(w)
	switch {
	case res.err != nil:
		return fmt.Errorf("replica-E reserving table 3: %w", res.err)
	case !res.booked:
		return errors.New("replica-E could not book table 3 after the crashed holder's TTL")
	case waited < etcdTTL-100*time.Millisecond:
		return fmt.Errorf("replica-E got table 3 %v after the crashed holder's grant, before its lease could expire (%v)", waited, etcdTTL)
	}
	if _, fence, err := db.booking(ctx, "3"); err != nil || fence <= leaseD.Fence() {
		return fmt.Errorf("table 3's booking has fence %d (%v), want one above the crashed holder's %d", fence, err, leaseD.Fence())
	}
	fmt.Fprintf(w, "   result: Eve got table 3 %v after the crashed holder's grant: etcd expired its lease, and its key with it,\n", waited.Round(time.Millisecond))
	fmt.Fprintln(w, "   at the TTL; Eve's fence (a later create revision) is above the dead holder's.")
	return nil
}
