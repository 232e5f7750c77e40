package circuit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
)

// TestClassifyMarks: the driver's vocabulary, as any backend returns it
// (wrapped or not), sorts the same way. The Redis backend's own errors are
// sorted in internal/redisclass, against real servers.
func TestClassifyMarks(t *testing.T) {
	bg := context.Background()
	ended, cancel := context.WithCancel(bg)
	cancel()
	plain := errors.New("some reply a healthy server gives")
	cases := []struct {
		name string
		err  error
		ctx  context.Context
		want Outcome
	}{
		{"nil", nil, bg, Success},
		{"contended", driver.ErrContended, bg, Success},
		{"contended wrapped", fmt.Errorf("acquire: %w", driver.ErrContended), bg, Success},
		{"plain reply", plain, bg, Success},
		{"failure mark", driver.Failure(plain), bg, Failure},
		{"failure mark wrapped", fmt.Errorf("x: %w", driver.Failure(plain)), bg, Failure},
		{"capacity mark", driver.Capacity(plain), bg, Ignored},
		{"capacity mark over a network error", driver.Capacity(io.EOF), bg, Ignored},
		{"connection dropped", io.ErrUnexpectedEOF, bg, Failure},
		{"command timeout, caller alive", context.DeadlineExceeded, bg, Failure},
		{"caller's own cancellation", context.Canceled, ended, Ignored},
		{"failure after the caller ended", fmt.Errorf("%w", context.Canceled), ended, Ignored},
	}
	for _, tc := range cases {
		if got := Classify(tc.err, tc.ctx); got != tc.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
		if got, want := IsBackendFailure(tc.err, tc.ctx), tc.want == Failure; got != want {
			t.Errorf("%s: IsBackendFailure = %v, want %v", tc.name, got, want)
		}
	}
	// A deadline that has passed is the caller's even before its timer fired.
	past, cancel2 := context.WithDeadline(bg, time.Now().Add(-time.Second))
	defer cancel2()
	if got := Classify(context.DeadlineExceeded, past); got != Ignored {
		t.Errorf("timeout after the caller's deadline = %v, want ignored", got)
	}
}

// TestClassifyNilCallerCtx: a nil callerCtx is a ctx that never ends, so a
// timeout is the backend's.
func TestClassifyNilCallerCtx(t *testing.T) {
	if got := Classify(context.DeadlineExceeded, nil); got != Failure {
		t.Errorf("Classify(DeadlineExceeded, nil) = %v, want failure", got)
	}
	if got := Classify(nil, nil); got != Success {
		t.Errorf("Classify(nil, nil) = %v, want success", got)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Success: "success", Failure: "failure", Ignored: "ignored", 7: "Outcome(7)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}
