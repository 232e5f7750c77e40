package obs_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The calls the lock runtime makes for one Do: acquire after one retry, run the
// caller's function under the hold span, renew once, release.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	in, err := obs.New(obs.Options{TracerProvider: tp}) // once per client
	if err != nil {
		panic(err)
	}
	table := in.Domain("table") // once per domain

	ctx, hold := table.StartHold(context.Background(), "lock:{table:42}")
	acquireCtx := hold.StartAcquire(ctx) // for the acquire script's Redis calls
	_ = acquireCtx
	hold.Retry(1, 50*time.Millisecond, telnames.OutcomeContended) // before sleeping
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 12})

	// fn(ctx, lease) runs with ctx: its spans nest under the hold span.

	_, renewal := hold.StartRenew(context.Background()) // in the renewal goroutine
	renewal.End(telnames.OutcomeOK, nil)

	_, release := hold.StartRelease(ctx)
	release.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)

	for _, s := range spans.GetSpans() {
		fmt.Println(s.Name, s.Status.Code)
	}
	// Output:
	// lockkit.acquire table Unset
	// lockkit.renew table Unset
	// lockkit.release table Unset
	// lockkit.hold table Unset
}

// TryDo found the lock held: an outcome, not an error.
func ExampleHold_EndAcquire_contended() {
	spans := tracetest.NewInMemoryExporter()
	in, _ := obs.New(obs.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))})
	ctx, hold := in.Domain("table").StartHold(context.Background(), "lock:{table:42}")
	hold.StartAcquire(ctx)
	errNotAcquired := errors.New("lockkit: not acquired")
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeContended, Attempts: 1, Contended: true, Err: errNotAcquired})
	hold.End(telnames.OutcomeContended, errNotAcquired)

	for _, s := range spans.GetSpans() {
		fmt.Println(s.Name, s.Status.Code)
	}
	// Output:
	// lockkit.acquire table Unset
	// lockkit.hold table Unset
}
