package lockkit

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
)

// Services that share one environment (one ConfigMap) see each other's
// overrides. By default New refuses a variable that names no domain of this
// program; WithSharedEnvironment logs it, once, and ignores it, while this
// program's own variables stay strictly checked (issue 26).
func TestSharedEnvironment(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "shared_own"})
	t.Setenv("LOCKKIT_TTL_BILLING_INVOICE", "9s")
	t.Setenv("LOCKKIT_MAX_HOLD_BILLING_INVOICE", "not a duration") // another service's mistake
	t.Setenv("LOCKKIT_PERMITS_BILLING_INVOICE", "3")
	t.Setenv("LOCKKIT_TTL_SHARED_OWN", "7s")

	// The default stays strict.
	if c, err := New(goredis.New(fakeUniversal(t))); c != nil || err == nil || !strings.Contains(err.Error(), "_BILLING_INVOICE") {
		t.Fatalf("New without the option = %v, %v; want an error naming a LOCKKIT_*_BILLING_INVOICE variable", c, err)
	}

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c, err := New(goredis.New(fakeUniversal(t)), WithLogger(log), WithSharedEnvironment())
	if err != nil {
		t.Fatalf("New with WithSharedEnvironment: %v", err)
	}
	if p := c.Domain(DomainSpec{Name: "shared_own", Policy: Policy{TTL: 30 * time.Second}}).Policy(); p.TTL != 7*time.Second {
		t.Errorf("own domain's TTL = %v, want 7s from LOCKKIT_TTL_SHARED_OWN", p.TTL)
	}
	for _, name := range []string{"LOCKKIT_TTL_BILLING_INVOICE", "LOCKKIT_MAX_HOLD_BILLING_INVOICE", "LOCKKIT_PERMITS_BILLING_INVOICE"} {
		if n := strings.Count(logs.String(), name); n != 1 {
			t.Errorf("%s is logged %d times, want once:\n%s", name, n, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("want the ignored variables logged at WARN:\n%s", logs.String())
	}

	// This program's own variables are still checked.
	t.Setenv("LOCKKIT_TTL_SHARED_OWN", "seven seconds")
	if c, err := New(goredis.New(fakeUniversal(t)), WithSharedEnvironment()); c != nil || err == nil || !strings.Contains(err.Error(), "LOCKKIT_TTL_SHARED_OWN") {
		t.Fatalf("an invalid value of an own variable under WithSharedEnvironment: New = %v, %v; want an error naming it", c, err)
	}
}
