package lockkit

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/telemetry"
)

// Under KeyHashed no log line quotes the raw key, on the paths whose log
// line carries an error that names it: a lease lost at its deadline (the
// server paused), a lease lost by a refused extend, and a failed release.
// The errors returned to the caller keep the key.
func TestKeyHashedLogLinesQuoteNoRawKey(t *testing.T) {
	const param = "alice@example.com"
	r := testserver.StartRedis(t)
	var buf telLogBuf
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond),
		WithKeyMode(telemetry.KeyHashed, []byte("log-secret")),
		WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	pii := func(d *Domain) Lock { return d.Key(32).Literal("pii:").String(param).Lock() }

	// Lost at the deadline.
	lost := pii(testDomain(t, c, Policy{TTL: 600 * time.Millisecond}))
	err := lost.Do(t.Context(), func(ctx context.Context, _ *Lease) error {
		r.Pause(t)
		defer r.Resume(t)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		return nil
	})
	if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), lost.Key()) {
		t.Fatalf("Do = %v, want ErrLockLost naming the key", err)
	}

	// Lost by a refused extend.
	d2 := c.Domain(DomainSpec{Name: "refused", Prefix: "lock:" + t.Name() + ":r:", Policy: Policy{TTL: 5 * time.Second, Renew: -1}})
	refused := pii(d2)
	lease, err := refused.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client(t).Del(t.Context(), refused.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	_ = lease.Extend(t.Context())
	_ = lease.Release(t.Context())

	// A release that fails: the server is paused when fn returns.
	d3 := c.Domain(DomainSpec{Name: "release", Prefix: "lock:" + t.Name() + ":f:", Policy: Policy{TTL: 5 * time.Second}})
	failed := pii(d3)
	if err := failed.Do(t.Context(), func(context.Context, *Lease) error { r.Pause(t); return nil }); err != nil {
		t.Fatalf("Do = %v", err)
	}
	r.Resume(t)

	log := buf.String()
	for _, msg := range []string{"lockkit: lease lost", "lockkit: release failed"} {
		if !strings.Contains(log, msg) {
			t.Errorf("no %q log line; log:\n%s", msg, log)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		for _, raw := range []string{lost.Key(), refused.Key(), failed.Key(), param} {
			if strings.Contains(line, raw) {
				t.Errorf("log line quotes %q: %s", raw, line)
			}
		}
	}
	if !strings.Contains(log, telemetry.HashKey(lost.Key(), []byte("log-secret"))) {
		t.Errorf("the log does not show the hashed key; log:\n%s", log)
	}
}
