package circuit

import (
	"context"
	"testing"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
)

// BenchmarkDoClosed measures Do's overhead in the closed state with an op
// that succeeds at once. Run with -benchmem: the figure to watch is 0
// allocs/op.
func BenchmarkDoClosed(b *testing.B) {
	br := New("bench", breaker.Settings{})
	ctx := context.Background()
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Do(ctx, op); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoClosedNil is the contention path: op returns
// driver.ErrContended, which must cost no more than a success.
func BenchmarkDoClosedNil(b *testing.B) {
	br := New("bench", breaker.Settings{})
	ctx := context.Background()
	op := func(context.Context) error { return driver.ErrContended }
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Do(ctx, op); err != driver.ErrContended {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoClosedParallel measures Do under contention for the breaker's
// lock.
func BenchmarkDoClosedParallel(b *testing.B) {
	br := New("bench", breaker.Settings{})
	ctx := context.Background()
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Do(ctx, op); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestDoClosedDoesNotAllocate guards the hot path: a success and contention
// (driver.ErrContended) cost no allocation in the closed state. It counts
// allocations, it does not time anything.
func TestDoClosedDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	br := New("allocs", breaker.Settings{})
	ctx := context.Background()
	for _, ret := range []error{nil, driver.ErrContended} {
		op := func(context.Context) error { return ret }
		if n := testing.AllocsPerRun(1000, func() { _ = br.Do(ctx, op) }); n != 0 {
			t.Errorf("Do with op returning %v: %v allocs per call, want 0", ret, n)
		}
	}
}
