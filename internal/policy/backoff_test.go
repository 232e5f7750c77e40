package policy

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// BackoffBounds agrees with the backoff the runtime uses: without jitter
// the sum is exact; with it, every sampled sum lies within the bounds, and
// the bounds are approached from both sides.
func TestBackoffBoundsMatchesRuntimeBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempts         int
		initial, max     time.Duration
		mult, jitter     float64
		wantLo, wantHigh time.Duration
	}{
		{5, 50 * time.Millisecond, time.Second, 2, 0.5, 375 * time.Millisecond, 1125 * time.Millisecond},
		{1, 50 * time.Millisecond, time.Second, 2, 0.5, 0, 0},
		{10, 100 * time.Millisecond, 2 * time.Second, 1.5, 0.25, 0, 0},
		{4, time.Minute, 90 * time.Minute, 1, 0.1, 0, 0},
	} {
		lo, hi := BackoffBounds(tc.attempts, tc.initial, tc.max, tc.mult, tc.jitter)
		if tc.wantHigh > 0 && (lo != tc.wantLo || hi != tc.wantHigh) {
			t.Errorf("%+v: bounds %v–%v, want %v–%v", tc, lo, hi, tc.wantLo, tc.wantHigh)
		}
		sum := func(jitter float64) time.Duration {
			b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(tc.initial), backoff.WithMaxInterval(tc.max),
				backoff.WithMultiplier(tc.mult), backoff.WithRandomizationFactor(jitter), backoff.WithMaxElapsedTime(0))
			var total time.Duration
			for range tc.attempts - 1 {
				total += b.NextBackOff()
			}
			return total
		}
		if exact, _ := BackoffBounds(tc.attempts, tc.initial, tc.max, tc.mult, 0); sum(0) != exact {
			t.Errorf("%+v without jitter: runtime waits %v in all, BackoffBounds says %v", tc, sum(0), exact)
		}
		var seenLo, seenHi time.Duration = hi, lo
		for range 2000 {
			s := sum(tc.jitter)
			if s < lo || s > hi {
				t.Fatalf("%+v: runtime waited %v in all, outside BackoffBounds %v–%v", tc, s, lo, hi)
			}
			seenLo, seenHi = min(seenLo, s), max(seenHi, s)
		}
		if span := hi - lo; span > 0 && (seenLo > lo+span/4 || seenHi < hi-span/4) {
			t.Errorf("%+v: samples span %v–%v, bounds %v–%v: the bounds are loose", tc, seenLo, seenHi, lo, hi)
		}
	}
}
