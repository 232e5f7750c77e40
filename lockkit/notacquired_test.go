package lockkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// A single attempt on a held lock (TryDo, TryAcquire, a domain without
// retry) names the key and the domain, and still matches ErrNotAcquired:
// the package doc says every error carries them (issue 26).
func TestNotAcquiredNamesKeyAndDomain(t *testing.T) {
	r := testserver.StartRedis(t)
	for _, tc := range []struct {
		name string
		p    Policy
	}{
		{"poll", Policy{TTL: 5 * time.Second}},
		{"fifo", Policy{TTL: 5 * time.Second, Wait: "fifo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDomain(t, newClient(t, r), tc.p)
			holder, err := lockOn(d, "busy").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(context.Background())

			l := lockOn(testDomain(t, newClient(t, r), tc.p), "busy")
			_, tryErr := l.TryAcquire(t.Context())
			doErr := l.TryDo(t.Context(), func(context.Context, *Lease) error { return nil })
			_, acqErr := l.Acquire(t.Context()) // the policy makes a single attempt
			for _, err := range []error{tryErr, doErr, acqErr} {
				if !errors.Is(err, ErrNotAcquired) {
					t.Fatalf("err = %v, want one matching ErrNotAcquired", err)
				}
				if msg := err.Error(); !strings.Contains(msg, l.key) || !strings.Contains(msg, `domain "test"`) {
					t.Errorf("err = %q, want it to name the key %s and the domain \"test\"", msg, l.key)
				}
			}
		})
	}
}
