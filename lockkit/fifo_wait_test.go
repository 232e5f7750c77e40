package lockkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// TestFIFOStallDuringFirstAttemptIsRetried: the server stalls (SIGSTOP)
// for 150ms during a FIFO Do's first attempt, past the 100ms command
// timeout. The wait goes on at the fallback interval with the same token
// and the Do succeeds; the failed attempt's error is never read as the ctx
// ending (which gave "stopped waiting …: %!w(<nil>)", matching no
// documented kind).
func TestFIFOStallDuringFirstAttemptIsRetried(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond))
	d := fifoDomain(t, c, fifoPolicy(2*time.Second, 10*time.Second))
	const rounds = 4
	for i := range rounds {
		l := lockOn(d, "stall")
		r.Pause(t)
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(150 * time.Millisecond)
			r.Resume(t)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ran := false
		err := l.Do(ctx, func(context.Context, *Lease) error { ran = true; return nil })
		cancel()
		<-resumed
		noNilWrap(t, err)
		if err != nil {
			t.Fatalf("round %d: Do after a 150ms stall = %v, want the wait to go on", i, err)
		}
		if !ran {
			t.Fatalf("round %d: fn did not run", i)
		}
	}
}

// noNilWrap fails t when an error's text shows a nil wrapped with %w.
func noNilWrap(t testing.TB, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "%!") {
		t.Errorf("malformed error text: %q", err)
	}
}
