// Package odd holds code that must not make the analyzer panic: generics,
// method values and expressions, interfaces, aliases, gotos and selects.
package odd

import (
	"context"
	"fmt"

	"github.com/lockkit/lockkit/lockkit"
)

type Lease = lockkit.Lease

type Generic[T any] struct {
	lockkit.Lock
	v T
}

func generic(ctx context.Context, l Generic[int]) error {
	lease, err := l.Acquire(ctx) // want `the lease from Generic.Acquire is not released on every path`
	if err != nil {
		return err
	}
	fmt.Println(lease.Fence(), l.v)
	return nil
}

type acquirer interface {
	Acquire(ctx context.Context) (*Lease, error)
}

// Calls through a type parameter or an interface are not lockkit's methods
// as far as the analyzer can tell.
func viaTypeParam[A acquirer](ctx context.Context, a A) {
	lease, _ := a.Acquire(ctx)
	fmt.Println(lease.Fence())
}

func viaInterface(ctx context.Context, a acquirer) {
	lease, _ := a.Acquire(ctx)
	fmt.Println(lease.Fence())
}

func genericLease[L interface{ *Lease }](ctx context.Context, l L) {
	fmt.Println(l)
}

// Method values are not followed.
func methodValues(ctx context.Context, l lockkit.Lock, run func(func(context.Context, func(context.Context, *Lease) error) error)) {
	acquire := l.Acquire
	lease, _ := acquire(ctx)
	fmt.Println(lease)
	do := l.Do
	do(ctx, func(context.Context, *Lease) error { return nil })
	run(l.TryDo)
	release := lease.Release
	release(ctx)
}

func methodExpression(ctx context.Context, l lockkit.Lock) error {
	lease, err := lockkit.Lock.Acquire(l, ctx) // want `the lease from Lock.Acquire is not released on every path`
	if err != nil {
		return err
	}
	fmt.Println(lease.Key())
	return nil
}

func pointerWrapper(ctx context.Context, p *struct{ lockkit.Lock }) error {
	return p.Do(ctx, func(lctx context.Context, lease *Lease) error {
		fmt.Println(ctx, lease.Fence())
		return use(ctx) // want `ctx is passed inside the fn of Do`
	})
}

func use(ctx context.Context) error { return nil }

func fnVariable(ctx context.Context, l lockkit.Lock) error {
	fn := func(_ context.Context, lease *Lease) error { return use(context.Background()) }
	return l.Do(ctx, fn)
}

func gotos(ctx context.Context, l lockkit.Lock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	n := 0
again:
	n++
	if n < 3 {
		goto again
	}
	select {
	case <-lease.Done():
		return lease.Release(ctx)
	case <-ctx.Done():
	}
	return lease.Release(ctx)
}

func forever(ctx context.Context, l lockkit.Lock) {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return
	}
	fmt.Println(lease.Fence())
	select {}
}

func noBody(ctx context.Context) error

func blankEverything(ctx context.Context, l lockkit.Lock) {
	_, _ = l.TryAcquire(ctx) // want `the lease from Lock.TryAcquire is discarded` `the error of Lock.TryAcquire is discarded`
}
