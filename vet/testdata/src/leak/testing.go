package leak

import (
	"context"
	"errors"
	"testing"

	"github.com/lockkit/lockkit/lockkit"
)

// A path on which the test has failed is not followed: the lease leaks
// only from a failed test.
func expectHeld(t *testing.T, ctx context.Context, l TableLock) {
	if _, err := l.TryAcquire(ctx); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Errorf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
}

func expectHeldTB(tb testing.TB, ctx context.Context, l TableLock) {
	_, err := l.TryAcquire(ctx)
	if !errors.Is(err, lockkit.ErrNotAcquired) {
		tb.Fail()
	}
}

// A test that succeeds with the lease still held leaks it all the same.
func acquiredInTest(t *testing.T, ctx context.Context, l TableLock) {
	if _, err := l.TryAcquire(ctx); err != nil { // want `the lease from TableLock.TryAcquire is discarded: if the call succeeds, nothing releases it before the end of the function`
		t.Fatal(err)
	}
}
