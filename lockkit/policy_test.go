package lockkit

import (
	"errors"
	"github.com/lockkit/lockkit/internal/policy"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
)

func TestPolicyValidation(t *testing.T) {
	c := &Client{cmdTimeout: policy.DefaultCommandTimeout}
	for _, tc := range []struct {
		name string
		p    Policy
		want string // substring of the error; "" means valid
	}{
		{"ok", Policy{TTL: time.Second}, ""},
		{"zero ttl", Policy{}, "ttl must be > 0"},
		{"renew as long as the ttl", Policy{TTL: time.Second, Renew: time.Second}, "renew interval 1s leaves no room to renew a 1s lease"},
		// Every lease would be lost before its first renewal: the renewal
		// lands after the local deadline (ttl − drift = 988ms).
		{"renew just under the ttl", Policy{TTL: time.Second, Renew: 995 * time.Millisecond}, "renew interval 995ms leaves no room to renew a 1s lease: a renewal sent then, answered within the command timeout 500ms"},
		{"renew without room for the command timeout", Policy{TTL: time.Second, Renew: 600 * time.Millisecond}, "renew at most every 488ms"},
		{"renew with room", Policy{TTL: time.Second, Renew: 480 * time.Millisecond}, ""},
		{"ttl below the minimum", Policy{TTL: 2 * time.Millisecond}, "ttl must be at least 10ms (got 2ms)"},
		{"sub-millisecond ttl", Policy{TTL: 1500 * time.Microsecond}, "ttl must be a whole number of milliseconds"},
		{"bad multiplier", Policy{TTL: time.Second, Retry: Retry{Attempts: 3, Multiplier: 0.5}}, "multiplier must be a finite number >= 1"},
		{"NaN multiplier", Policy{TTL: time.Second, Retry: Retry{Attempts: 3, Multiplier: math.NaN()}}, "multiplier must be a finite number >= 1 (got NaN)"},
		{"Inf multiplier", Policy{TTL: time.Second, Retry: Retry{Attempts: 3, Multiplier: math.Inf(1)}}, "multiplier must be a finite number >= 1 (got +Inf)"},
		{"bad jitter", Policy{TTL: time.Second, Retry: Retry{Jitter: 2}}, "jitter must be above 0 and at most 1 (got 2)"},
		{"NaN jitter", Policy{TTL: time.Second, Retry: Retry{Jitter: math.NaN()}}, "jitter must be above 0 and at most 1 (got NaN)"},
		{"negative jitter", Policy{TTL: time.Second, Retry: Retry{Jitter: -0.5}}, "jitter must be above 0 and at most 1"},
		{"negative attempts", Policy{TTL: time.Second, Retry: Retry{Attempts: -1}}, "max attempts must be >= 0"},
		{"max below initial", Policy{TTL: time.Second, Retry: Retry{Initial: time.Second, Max: time.Millisecond}}, "max interval 1ms must be >= the initial interval 1s"},
	} {
		d := c.Domain(DomainSpec{Name: "d", Policy: tc.p})
		switch {
		case tc.want == "" && d.err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, d.err)
		case tc.want != "" && (d.err == nil || !strings.Contains(d.err.Error(), tc.want)):
			t.Errorf("%s: error %v, want it to contain %q", tc.name, d.err, tc.want)
		}
		if tc.want != "" {
			// A bad domain never panics: its locks return the error.
			_, err := d.Key(0).Literal("x").Lock().TryAcquire(t.Context())
			if err == nil || err != d.err {
				t.Errorf("%s: TryAcquire = %v, want the domain error", tc.name, err)
			}
		}
	}
	if got := c.Domain(DomainSpec{Name: "d", Policy: Policy{TTL: 3 * time.Second}}).Policy().Renew; got != time.Second {
		t.Errorf("default renew interval = %v, want ttl/3 = 1s", got)
	}
}

func TestTTLOverrides(t *testing.T) {
	got, err := readOverrides([]string{"PATH=/bin", "LOCKKIT_TTL_TABLE=8s", "LOCKKIT_TTL_USER_DIGEST= 250ms"})
	if err != nil {
		t.Fatal(err)
	}
	if got["LOCKKIT_TTL_TABLE"] != 8*time.Second || got["LOCKKIT_TTL_USER_DIGEST"] != 250*time.Millisecond || len(got) != 2 {
		t.Fatalf("overrides = %v", got)
	}
	_, err = readOverrides([]string{"LOCKKIT_TTL_TABLE=8", "LOCKKIT_TTL_JOB=-1s", "LOCKKIT_TTL_X=500us", "LOCKKIT_TTL_Y=2ms", "LOCKKIT_TTL_Z=1500us"})
	if err == nil {
		t.Fatal("invalid values must be an error")
	}
	for _, want := range []string{
		`LOCKKIT_TTL_TABLE="8" is not a duration; write a Go duration such as 8s or 500ms`,
		`LOCKKIT_TTL_JOB="-1s": ttl must be > 0`,
		// These used to pass, and every acquire then failed as ErrUnavailable.
		`LOCKKIT_TTL_X="500us": ttl must be a whole number of milliseconds`,
		`LOCKKIT_TTL_Y="2ms": ttl must be at least 10ms`,
		`LOCKKIT_TTL_Z="1500us": ttl must be a whole number of milliseconds`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestNewRejectsInvalidEnv(t *testing.T) {
	t.Setenv("LOCKKIT_TTL_TABLE", "eight seconds")
	_, err := New(goredis.New(nil))
	if err == nil {
		t.Fatal("New(goredis.New(nil)) must fail")
	}
	c, err := New(goredis.New(fakeUniversal(t)))
	if c != nil || err == nil || !strings.Contains(err.Error(), "LOCKKIT_TTL_TABLE") {
		t.Fatalf("New = %v, %v; want an error naming LOCKKIT_TTL_TABLE", c, err)
	}
}

// A LOCKKIT_TTL_* variable that names no domain of the program is a mistake
// that would otherwise be ignored in silence: New refuses it, naming it and
// the variables that would work.
func TestNewRejectsOverrideOfNoDomain(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "table"}, DomainSpec{Name: "user_digest"})
	t.Setenv("LOCKKIT_TTL_TABEL", "9s")
	c, err := New(goredis.New(fakeUniversal(t)))
	if c != nil || err == nil {
		t.Fatalf("New = %v, %v; want an error", c, err)
	}
	for _, want := range []string{"LOCKKIT_TTL_TABEL names no lock domain of this program", "LOCKKIT_TTL_TABLE", "LOCKKIT_TTL_USER_DIGEST"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// An override is validated with the policy it lands in: a TTL that leaves a
// schema's explicit renew interval no room is a domain error naming the
// variable, not a stream of lost leases.
func TestEnvOverrideValidatedWithPolicy(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "table"})
	t.Setenv("LOCKKIT_TTL_TABLE", "600ms")
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain(DomainSpec{Name: "table", Policy: Policy{TTL: 30 * time.Second}})
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "(with the TTL 600ms from LOCKKIT_TTL_TABLE)") {
		t.Fatalf("domain error = %v; want the renew rule, naming the variable", d.Err())
	}
}

func TestEnvOverrideApplies(t *testing.T) {
	RegisterDomains(DomainSpec{Name: "table"}, DomainSpec{Name: "job"})
	t.Setenv("LOCKKIT_TTL_TABLE", "9s")
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Domain(DomainSpec{Name: "table", Policy: Policy{TTL: 30 * time.Second, Renew: 10 * time.Second}}).Policy()
	if p.TTL != 9*time.Second || p.Renew != 3*time.Second {
		t.Fatalf("policy = ttl %v renew %v, want 9s and 3s", p.TTL, p.Renew)
	}
	other := c.Domain(DomainSpec{Name: "job", Policy: Policy{TTL: 30 * time.Second}}).Policy()
	if other.TTL != 30*time.Second {
		t.Fatalf("unrelated domain changed: %v", other.TTL)
	}
}

func TestZeroLock(t *testing.T) {
	var l Lock
	if err := l.Do(t.Context(), nil); !errors.Is(err, ErrNoClient) {
		t.Fatalf("zero Lock Do = %v, want ErrNoClient", err)
	}
	if _, err := l.TryAcquire(t.Context()); !errors.Is(err, ErrNoClient) {
		t.Fatalf("zero Lock TryAcquire = %v, want ErrNoClient", err)
	}
}

func TestRetryDefaults(t *testing.T) {
	p := Policy{TTL: time.Second, Retry: Retry{Attempts: 3}}.withDefaults()
	want := Retry{Attempts: 3, Initial: policy.DefaultInitialInterval, Max: policy.DefaultMaxInterval, Multiplier: policy.DefaultMultiplier, Jitter: policy.DefaultJitter}
	if p.Retry != want {
		t.Fatalf("defaults = %+v, want %+v", p.Retry, want)
	}
}

func TestNilClientDomain(t *testing.T) {
	var c *Client
	d := c.Domain(DomainSpec{Name: "x", Policy: Policy{TTL: time.Second}})
	if _, err := d.Key(1).Literal("x").Lock().TryAcquire(t.Context()); !errors.Is(err, ErrNoClient) {
		t.Fatalf("lock of a nil client's domain = %v, want ErrNoClient", err)
	}
}

func TestPrefixWithBraceRefused(t *testing.T) {
	d := (&Client{}).Domain(DomainSpec{Name: "x", Prefix: "app{}:", Policy: Policy{TTL: time.Second}})
	if d.err == nil || !strings.Contains(d.err.Error(), `prefix "app{}:" must not contain '{' or '}'`) {
		t.Fatalf("domain error = %v", d.err)
	}
}
