// Command leader runs a continuous scheduler job on three replicas of a
// service, of which one leads: the leader runs the job, the others stand by.
// Then the leader is killed (abandoned without resigning: its connections
// drop, it never releases its term) and another replica takes over once the
// dead leader's term runs out. The callbacks are in client-go's style
// (OnStartedLeading, OnStoppedLeading, OnNewLeader), and elector fits
// gocron's Elector (IsLeader).
//
//	go run ./examples/leader
//
// With no REDIS_URL it runs on an embedded in-process Redis.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("leader", run) }

// callbacks are client-go's leader election callbacks.
type callbacks struct {
	OnStartedLeading func(ctx context.Context, term int64)
	OnStoppedLeading func(err error)
	OnNewLeader      func(ld lockkit.Leader)
}

// campaign stands for leadership until ctx ends, calling cb as client-go
// does: OnStartedLeading runs for the term, OnStoppedLeading after it.
func campaign(ctx context.Context, e lockkit.Election, cb callbacks) {
	for ctx.Err() == nil {
		err := e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
			cb.OnStartedLeading(ctx, term.Number())
			return nil
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, lockkit.ErrLockLost) {
			return // closed, or a configuration error
		}
		cb.OnStoppedLeading(err)
	}
}

// elector fits gocron's Elector: IsLeader is nil while this replica leads.
type elector struct {
	e     lockkit.Election
	token atomic.Pointer[string] // the running term's token, nil when not leading
}

func (el *elector) IsLeader(ctx context.Context) error {
	ld, err := el.e.Leader(ctx)
	if err != nil {
		return err
	}
	if t := el.token.Load(); t == nil || ld.Token != *t {
		return errors.New("not the leader")
	}
	return nil
}

type replica struct {
	name    string
	c       *lockkit.Client
	stop    context.CancelFunc
	crashed atomic.Bool
}

// run starts three replicas campaigning for the reindex job's leadership,
// kills the first leader, and waits for another to take over.
func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	fmt.Fprintln(w, "\nThree replicas campaign to lead the continuous reindex job")
	var (
		leading, most atomic.Int32
		mu            sync.Mutex
		started       = make(chan *replica, 8)
		terms         []int64
		wg            sync.WaitGroup
	)
	replicas := make([]*replica, 3)
	for i := range replicas {
		c, err := env.NewClient(lockkit.WithOwner(fmt.Sprintf("replica-%d", i+1)))
		if err != nil {
			return err
		}
		rctx, stop := context.WithCancel(ctx)
		r := &replica{name: fmt.Sprintf("replica-%d", i+1), c: c, stop: stop}
		replicas[i] = r
		e := locks.New(c).CronLeader("reindex")
		el := &elector{e: e.Election}
		wg.Go(func() {
			campaign(rctx, e.Election, callbacks{
				OnStartedLeading: func(ctx context.Context, term int64) {
					n := leading.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					mu.Lock()
					terms = append(terms, term)
					mu.Unlock()
					tok := ""
					if ld, err := e.Leader(ctx); err == nil {
						tok = ld.Token
					}
					el.token.Store(&tok)
					fmt.Fprintf(w, "%s  leads term %d; IsLeader: %v\n", r.name, term, el.IsLeader(ctx) == nil)
					started <- r
					<-ctx.Done() // the job runs until the term ends
					el.token.Store(nil)
					leading.Add(-1)
				},
				OnStoppedLeading: func(err error) {
					if r.crashed.Load() {
						r.stop() // a dead process campaigns no more
					}
				},
				OnNewLeader: func(lockkit.Leader) {},
			})
		})
	}
	first := <-started
	// An observer in OnNewLeader's place: who leads, as the store says.
	octx, ostop := context.WithTimeout(ctx, 30*time.Second)
	oc, err := env.NewClient(lockkit.WithOwner("observer"))
	if err != nil {
		ostop()
		return err
	}
	changes, err := locks.New(oc).CronLeader("reindex").Observe(octx)
	if err != nil {
		ostop()
		return err
	}
	crashed := time.Now()
	first.crashed.Store(true)
	fmt.Fprintf(w, "%s  killed (it never resigns; its term runs out after the TTL)\n", first.name)
	if err := env.Crash(first.c); err != nil {
		ostop()
		return err
	}
	var next *replica
	select {
	case next = <-started:
	case <-time.After(30 * time.Second):
		ostop()
		return errors.New("no replica took over within 30s")
	}
	fmt.Fprintf(w, "%s  took over %v after the leader was killed\n", next.name, time.Since(crashed).Round(100*time.Millisecond))
	for ld := range changes {
		if ld.Owner == next.name {
			fmt.Fprintf(w, "observer  the leader is %s, term %d\n", ld.Owner, ld.Term)
			break
		}
	}
	ostop()
	for _, r := range replicas {
		r.stop()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(w, "terms %v; at most %d leader at a time\n", terms, most.Load())
	if most.Load() != 1 {
		return fmt.Errorf("%d replicas led at once", most.Load())
	}
	return nil
}
