// Package ctxcheck holds the cases of rule 2: the fn of Do or TryDo passes
// a context other than its own ctx.
package ctxcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/lockkit/lockkit/lockkit"
)

type TableLock struct{ lockkit.Lock }

func save(ctx context.Context, fence int64) error { return nil }

func startSpan(ctx context.Context, name string) (context.Context, func()) { return ctx, func() {} }

// --- reported ---

func outerCtx(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(lctx context.Context, lease *lockkit.Lease) error {
		return save(ctx, lease.Fence()) // want `ctx is passed inside the fn of TableLock.Do: pass fn's lctx, which is cancelled when the lease is lost`
	})
}

func background(ctx context.Context, l TableLock) error {
	return l.TryDo(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		if err := save(context.Background(), lease.Fence()); err != nil { // want `context.Background\(\) is passed inside the fn of TableLock.TryDo: pass fn's ctx`
			return err
		}
		return save(context.TODO(), lease.Fence()) // want `context.TODO\(\) is passed`
	})
}

func derivedFromOuter(parent context.Context, l lockkit.Lock) error {
	return l.Do(parent, func(ctx context.Context, lease *lockkit.Lease) error {
		tctx, cancel := context.WithTimeout(parent, time.Second) // want `parent is passed inside the fn of Lock.Do: pass fn's ctx`
		defer cancel()
		return save(tctx, lease.Fence()) // want `tctx is passed inside the fn of Lock.Do`
	})
}

func shadowed(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		{
			ctx := context.WithoutCancel(context.Background()) // want `context.Background\(\) is passed`
			return save(ctx, lease.Fence())                    // want `ctx is passed inside the fn of TableLock.Do`
		}
	})
}

func unnamedParam(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(_ context.Context, lease *lockkit.Lease) error {
		return save(ctx, lease.Fence()) // want `ctx is passed inside the fn of TableLock.Do: pass fn's ctx, which`
	})
}

func nilContext(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(c context.Context, lease *lockkit.Lease) error {
		return save(nil, lease.Fence()) // want `nil is passed inside the fn of TableLock.Do: pass fn's c`
	})
}

func replaced(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		ctx = context.Background() // want `context.Background\(\) replaces the ctx of the fn of TableLock.Do`
		return save(ctx, lease.Fence())
	})
}

func nestedUsesOuterFn(ctx context.Context, a, b TableLock) error {
	return a.Do(ctx, func(actx context.Context, la *lockkit.Lease) error {
		return b.Do(actx, func(bctx context.Context, lb *lockkit.Lease) error {
			return save(actx, la.Fence()+lb.Fence()) // want `actx is passed inside the fn of TableLock.Do: pass fn's bctx`
		})
	})
}

// --- not reported ---

func ownCtx(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return save(ctx, lease.Fence())
	})
}

func derived(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(lctx context.Context, lease *lockkit.Lease) error {
		sctx, end := startSpan(lctx, "book")
		defer end()
		tctx, cancel := context.WithTimeout(sctx, time.Second)
		defer cancel()
		var wctx = context.WithoutCancel(tctx)
		done := make(chan error, 1)
		go func() { done <- save(tctx, lease.Fence()) }()
		if err := save(wctx, lease.Fence()); err != nil {
			return err
		}
		return <-done
	})
}

func nestedOwnCtx(ctx context.Context, a, b TableLock) error {
	return a.Do(ctx, func(actx context.Context, la *lockkit.Lease) error {
		return b.Do(actx, func(bctx context.Context, lb *lockkit.Lease) error {
			return save(bctx, la.Fence()+lb.Fence())
		})
	})
}

func book(ctx context.Context, lease *lockkit.Lease) error { return save(ctx, lease.Fence()) }

func namedFn(ctx context.Context, l TableLock) error {
	if err := save(context.Background(), 0); err != nil {
		return err
	}
	return l.Do(ctx, book)
}

// No fix where fn's ctx is shadowed: the name would pick up the wrong one.
func shadowedParam(parent context.Context, l TableLock) error {
	return l.Do(parent, func(ctx context.Context, lease *lockkit.Lease) error {
		for _, ctx := range []string{"a"} {
			fmt.Println(ctx)
			return save(parent, lease.Fence()) // want `parent is passed inside the fn of TableLock.Do`
		}
		return nil
	})
}
