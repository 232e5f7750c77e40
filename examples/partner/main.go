// Command partner calls a rate-limited third-party API from several replicas
// of a service: the partner allows at most three calls in flight per
// customer, and answers 429 to a fourth. Every call holds one of the
// customer's three permits (locks.PartnerAPI(customer), a semaphore of
// lockkit.yaml), so twelve workers on three replicas never send a fourth;
// the fake partner counts what it sees.
//
//	go run ./examples/partner
//
// With no REDIS_URL it runs on an embedded in-process Redis.
package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("partner", run) }

// partner is the fake third-party API: it counts the calls in flight per
// customer and refuses one over its limit, as a real partner's 429 would.
type partner struct {
	limit    int32
	inFlight sync.Map // customer -> *atomic.Int32
	most     atomic.Int32
	refused  atomic.Int32
	served   atomic.Int32
}

func (p *partner) call(ctx context.Context, customer string) error {
	v, _ := p.inFlight.LoadOrStore(customer, new(atomic.Int32))
	n := v.(*atomic.Int32).Add(1)
	defer v.(*atomic.Int32).Add(-1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	if n > p.limit {
		p.refused.Add(1)
		return fmt.Errorf("429: %d calls in flight for %s, the limit is %d", n, customer, p.limit)
	}
	select { // the call's work
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	p.served.Add(1)
	return nil
}

// run sends 36 calls for one customer from 12 workers on 3 replicas.
func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	const replicas, workers, calls = 3, 4, 3
	p := &partner{limit: 3}
	fmt.Fprintf(w, "\n%d replicas × %d workers call the partner for customer acme, %d calls each; the partner allows %d in flight\n",
		replicas, workers, calls, p.limit)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for r := range replicas {
		c, err := env.NewClient(lockkit.WithOwner(fmt.Sprintf("replica-%d", r+1)))
		if err != nil {
			return err
		}
		l := locks.New(c)
		for range workers {
			wg.Go(func() {
				for range calls {
					err := l.PartnerAPI("acme").Do(ctx, func(ctx context.Context, permit *lockkit.Lease) error {
						return p.call(ctx, "acme")
					})
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	fmt.Fprintf(w, "partner: %d calls served, %d refused; at most %d in flight at once\n", p.served.Load(), p.refused.Load(), p.most.Load())
	if len(errs) > 0 {
		return fmt.Errorf("%d calls failed, the first: %w", len(errs), errs[0])
	}
	if p.most.Load() > p.limit {
		return fmt.Errorf("%d calls were in flight at once; the semaphore allows %d", p.most.Load(), p.limit)
	}
	return nil
}
