// Package election holds the cases of an election's Lead: its fn's ctx is
// the term's (rule 2), its error is checked (rule 3), and its fn reads the
// term's number, the fence (rule 5), as for a lock's Do.
package election

import (
	"context"

	"github.com/lockkit/lockkit/lockkit"
)

// ReportLock is a generated election type: it wraps lockkit.Election (no
// fencing marker; an election always fences).
type ReportLock struct{ lockkit.Election }

func run(ctx context.Context, term int64) error { return nil }

func write(ctx context.Context, v string) error { return nil }

func keep(t *lockkit.Term) {}

// --- reported ---

func outerCtx(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(lctx context.Context, term *lockkit.Term) error {
		return run(ctx, term.Number()) // want `ctx is passed inside the fn of ReportLock.Lead: pass fn's lctx`
	})
}

func outerDone(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(lctx context.Context, term *lockkit.Term) error {
		<-ctx.Done() // want `ctx.Done is read inside the fn of ReportLock.Lead`
		return run(lctx, term.Number())
	})
}

func background(ctx context.Context, e lockkit.Election) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		return run(context.Background(), term.Number()) // want `context.Background\(\) is passed inside the fn of Election.Lead`
	})
}

func termUnread(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error { // want `the fn of ReportLock.Lead never reads term.Number\(\): a term's number is its fence`
		if err := term.Err(); err != nil {
			return err
		}
		return write(ctx, "report")
	})
}

func termUnnamed(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, _ *lockkit.Term) error { // want `never reads term.Number\(\)`
		return write(ctx, "report")
	})
}

func discarded(ctx context.Context, e ReportLock) {
	e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error { // want `the error of ReportLock.Lead is discarded`
		return run(ctx, term.Number())
	})
}

func blank(ctx context.Context, e ReportLock) {
	_ = e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error { // want `the error of ReportLock.Lead is assigned to _`
		return run(ctx, term.Number())
	})
}

// A Lead inside a Do's fn is checked on its own: its fn's ctx is the term's.
func nested(ctx context.Context, l lockkit.Lock, e ReportLock) error {
	return l.Do(ctx, func(lctx context.Context, lease *lockkit.Lease) error {
		return e.Lead(lctx, func(tctx context.Context, term *lockkit.Term) error {
			return run(lctx, term.Number()) // want `lctx is passed inside the fn of ReportLock.Lead: pass fn's tctx`
		})
	})
}

// --- not reported ---

func good(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		return run(ctx, term.Number())
	})
}

func derived(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		return run(wctx, term.Number())
	})
}

// The term's lease carries the same number.
func viaLease(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		return run(ctx, term.Lease().Fence())
	})
}

// Handing the term on counts as reading it: the callee may.
func handedOn(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		keep(term)
		return write(ctx, "report")
	})
}

// A fn that calls nothing writes nowhere: no fence is needed.
func probe(ctx context.Context, e ReportLock) error {
	return e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		return term.Err()
	})
}

func checked(ctx context.Context, e ReportLock) error {
	if err := e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		return run(ctx, term.Number())
	}); err != nil {
		return err
	}
	return nil
}
