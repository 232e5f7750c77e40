package lockkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// A domain can say "wait up to D" without choosing a number of attempts:
// Retry{MaxWait: D} retries until D has passed (issue 26: attempts 5 and
// max_wait 5s gave up after 815ms; a FIFO domain had to name attempts that
// bound nothing). Both wait modes: the lock, held for 700ms, is taken; held
// for longer than D, the acquisition gives up no earlier than D.
func TestRetryMaxWaitWithoutAttempts(t *testing.T) {
	r := testserver.StartRedis(t)
	const maxWait = 1500 * time.Millisecond
	for _, tc := range []struct {
		name string
		p    Policy
	}{
		{"poll", Policy{TTL: 10 * time.Second, Retry: Retry{MaxWait: maxWait, Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}}},
		{"fifo", Policy{TTL: 10 * time.Second, Wait: "fifo", Retry: Retry{MaxWait: maxWait}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holderDomain := testDomain(t, newClient(t, r), Policy{TTL: 10 * time.Second, Wait: tc.p.Wait})
			waiter := lockOn(testDomain(t, newClient(t, r), tc.p), "k")
			if got := waiter.d.Policy().Retry; got.Attempts != 0 || got.MaxWait != maxWait {
				t.Fatalf("Policy().Retry = %+v, want Attempts 0 (no bound) and MaxWait %v", got, maxWait)
			}

			// Released after 700ms: the waiter gets it.
			held, err := lockOn(holderDomain, "k").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(700 * time.Millisecond)
				_ = held.Release(context.Background())
			}()
			ran := false
			if err := waiter.Do(t.Context(), func(context.Context, *Lease) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("Do behind a 700ms holder with max wait %v = %v (fn ran: %v), want the lock", maxWait, err, ran)
			}

			// Held throughout: it gives up, after max wait and not before.
			held, err = lockOn(holderDomain, "k").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(context.Background())
			start := time.Now()
			_, err = waiter.Acquire(t.Context())
			took := time.Since(start)
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("Acquire behind a holder = %v, want ErrNotAcquired", err)
			}
			if took < maxWait || took > maxWait+5*time.Second {
				t.Errorf("Acquire gave up after %v, want max wait %v (plus at most a command and a generous margin)", took, maxWait)
			}
		})
	}
}
