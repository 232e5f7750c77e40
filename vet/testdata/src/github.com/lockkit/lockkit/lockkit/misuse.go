package lockkit

import "context"

// misuse breaks every rule, as the runtime's own tests do on purpose: the
// analyzer skips the runtime package, so nothing here is reported.
func misuse(ctx context.Context, l Lock) {
	l.Acquire(ctx)
	lease, _ := l.TryAcquire(ctx)
	lease.Release(ctx)
	lease.Release(ctx)
	_ = l.Do(ctx, func(context.Context, *Lease) error {
		return l.TryDo(context.Background(), nil)
	})
}
