package lockkit

import (
	"context"
	"fmt"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/errcheck"
)

// DoOn runs l's Do with be in place of its Client's backend: for a lock
// that lives as long as something be holds (postgres.DoTx's transaction),
// with the Client's retries, telemetry, lease tracking, deadlines and error
// vocabulary. be is not guarded by the Client's breakers, but each acquire
// on it is bounded by the Client's command timeout (WithCommandTimeout), as
// well as by ctx; a statement be sends of its own before or after (to open
// or end what it holds) should be bounded by it too.
func DoOn(ctx context.Context, l Lock, be driver.Backend, fn func(ctx context.Context, lease *Lease) error) error {
	if l.d == nil {
		return ErrNoClient
	}
	if be == nil || fn == nil {
		return fmt.Errorf("lockkit: DoOn %s: nil backend or fn", l.key)
	}
	lease, fctx, err := l.acquireOn(ctx, be, true, true)
	if err != nil {
		return errcheck.Returned(err)
	}
	return lease.run(fctx, fn)
}
