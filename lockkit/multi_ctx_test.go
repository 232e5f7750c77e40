package lockkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

// cancelOnContended is goredis.New's backend, taking a set's locks one by
// one, that calls cancel once an Acquire has found its key held: the
// caller's ctx ends during the attempt, after its answer. Acquire and
// AcquireAll alike.
type cancelOnContended struct {
	driver.Backend
	cancel context.CancelFunc
	batch  bool // the set in one step (AcquireAll), or one by one
}

func (b *cancelOnContended) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	fence, err := b.Backend.Acquire(ctx, req)
	if errors.Is(err, driver.ErrContended) {
		b.cancel()
	}
	return fence, err
}

// CanBatch and AcquireAll: the set in one step, as goredis takes it.
func (b *cancelOnContended) CanBatch(keys []string) bool {
	return b.Backend.(driver.Batcher).CanBatch(keys)
}

func (b *cancelOnContended) AcquireAll(ctx context.Context, reqs []*driver.Request) ([]int64, error) {
	fences, err := b.Backend.(driver.Batcher).AcquireAll(ctx, reqs)
	if errors.Is(err, driver.ErrContended) {
		b.cancel()
	}
	return fences, err
}

// Capabilities are the wrapped backend's, less those of the interfaces the
// wrapper hides: its locks poll.
func (b *cancelOnContended) Capabilities() driver.Capabilities {
	caps := b.Backend.Capabilities()
	caps.FairQueue, caps.ServerQueue, caps.Routing, caps.Holders = false, false, false, false
	caps.Batching = b.batch
	return caps
}

// TestDoAllCtxEndsDuringAttempt: a DoAll whose ctx ends during an attempt
// that found a key held returns the ctx's error, as a single lock's Do
// does, not the contention (ErrNotAcquired), which reads as "the locks were
// busy" to a caller that stopped waiting itself.
func TestDoAllCtxEndsDuringAttempt(t *testing.T) {
	r := testserver.StartRedis(t)
	p := Policy{TTL: 10 * time.Second, Retry: Retry{MaxWait: 10 * time.Second}}
	d := testDomain(t, newClient(t, r), p)
	held, err := lockOn(d, "b").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := held.Release(t.Context()); err != nil {
			t.Error(err)
		}
	}()

	for _, batch := range []bool{true, false} {
		w := &cancelOnContended{batch: batch}
		spec := goredis.New(r.Client(t))
		open := spec.Open
		spec.Open = func(cfg driver.Config) (driver.Backend, error) {
			be, err := open(cfg)
			w.Backend = be
			return w, err
		}
		dw := testDomain(t, newClientOn(t, spec), p)
		for _, call := range []struct {
			name string
			run  func(context.Context, func(context.Context, *LeaseSet) error, ...Locker) error
		}{{"DoAll", DoAll}, {"TryDoAll", TryDoAll}} {
			ctx, cancel := context.WithCancel(t.Context())
			w.cancel = cancel
			err := call.run(ctx, func(context.Context, *LeaseSet) error { return nil }, lockOn(dw, "a"), lockOn(dw, "b"))
			if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotAcquired) {
				t.Errorf("%s (batched: %v) = %v; want the ctx's error (context.Canceled), not ErrNotAcquired", call.name, batch, err)
			}
			cancel()
		}
	}
}
