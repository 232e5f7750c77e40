package lockkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
)

// A domain's kind and permits follow internal/policy's rule at run time as
// in the schema: an unknown kind, permits on a lock or an election, and a
// semaphore without permits make the domain return its error.
func TestKindAndPermitsRule(t *testing.T) {
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		kind    string
		permits int
		want    string // "" for a valid domain
	}{
		{"", 0, ""},
		{"lock", 0, ""},
		{"election", 0, ""},
		{"semaphore", 3, ""},
		{"semaphore", 0, "permits must be at least 1 (got 0)"},
		{"semaphore", -2, "permits must be at least 1 (got -2)"},
		{"", 2, "permits 2 is for kind semaphore only; this domain is kind lock"},
		{"election", 1, "permits 1 is for kind semaphore only; this domain is kind election"},
		{"mutex", 0, `kind must be "lock" (the default), "election" or "semaphore" (got "mutex")`},
	} {
		d := c.Domain(DomainSpec{Name: "kinds", Policy: Policy{TTL: time.Second, Kind: tc.kind, Permits: tc.permits}})
		switch err := d.Err(); {
		case tc.want == "" && err != nil:
			t.Errorf("kind %q permits %d: %v", tc.kind, tc.permits, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `domain "kinds"`)):
			t.Errorf("kind %q permits %d: error %v, want one naming the domain and saying %q", tc.kind, tc.permits, err, tc.want)
		}
	}
}

// LOCKKIT_PERMITS_<NAME> overrides a semaphore's permits by the TTL
// override's rules: read and checked (>= 1) by New, refused by New when it
// names no registered domain, applied by Client.Domain and checked there
// against the kind, naming the variable.
func TestPermitsEnvOverride(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "permits_env"})
	t.Setenv("LOCKKIT_PERMITS_PERMITS_ENV", " 5")
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Domain(DomainSpec{Name: "permits_env", Policy: Policy{TTL: time.Second, Kind: "semaphore", Permits: 2}}).Policy(); p.Permits != 5 {
		t.Errorf("Permits = %d, want 5 from LOCKKIT_PERMITS_PERMITS_ENV", p.Permits)
	}
	d := c.Domain(DomainSpec{Name: "permits_env", Policy: Policy{TTL: time.Second}})
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "(with the permits 5 from LOCKKIT_PERMITS_PERMITS_ENV)") {
		t.Errorf("permits from the environment on a lock domain: %v", d.Err())
	}
	_ = c.Close(context.Background())

	for val, want := range map[string]string{
		"three": `LOCKKIT_PERMITS_PERMITS_ENV="three" is not a whole number`,
		"0":     `LOCKKIT_PERMITS_PERMITS_ENV="0": permits must be at least 1`,
	} {
		t.Setenv("LOCKKIT_PERMITS_PERMITS_ENV", val)
		if _, err := New(goredis.New(fakeUniversal(t))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LOCKKIT_PERMITS_PERMITS_ENV=%q: New = %v, want %q", val, err, want)
		}
	}
	t.Setenv("LOCKKIT_PERMITS_PERMITS_ENV", "2")
	t.Setenv("LOCKKIT_PERMITS_PERMIT_ENV", "2")
	if _, err := New(goredis.New(fakeUniversal(t))); err == nil || !strings.Contains(err.Error(), "LOCKKIT_PERMITS_PERMIT_ENV names no lock domain") {
		t.Errorf("a mistyped permits variable: New = %v", err)
	}
}
