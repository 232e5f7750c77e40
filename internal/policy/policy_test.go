package policy

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The renew rule at its boundary: a renewal sent at renew must be answered
// (within the command timeout) before ttl − drift.
func TestCheckRenewBoundary(t *testing.T) {
	const ttl = time.Second // drift 12ms: local deadline 988ms
	for _, tc := range []struct {
		renew, cmd time.Duration
		ok         bool
	}{
		{-1, DefaultCommandTimeout, true}, // never renew
		{488 * time.Millisecond, 500 * time.Millisecond, true},
		{489 * time.Millisecond, 500 * time.Millisecond, false},
		{988 * time.Millisecond, 0, true},
		{989 * time.Millisecond, 0, false},
		{995 * time.Millisecond, 0, false}, // the audit's case
		{100 * time.Millisecond, 2 * time.Second, false},
		{0, 0, false},
	} {
		err := CheckRenew(ttl, tc.renew, tc.cmd)
		if (err == nil) != tc.ok {
			t.Errorf("CheckRenew(1s, %v, %v) = %v, want ok=%v", tc.renew, tc.cmd, err, tc.ok)
		}
	}
	if err := CheckRenew(ttl, 100*time.Millisecond, 2*time.Second); err == nil || !strings.Contains(err.Error(), "use a longer ttl or a shorter command timeout") {
		t.Errorf("no room at all: %v", err)
	}
}

func TestCheckTTL(t *testing.T) {
	for d, ok := range map[time.Duration]bool{
		0: false, -time.Second: false, 500 * time.Microsecond: false, 1500 * time.Microsecond: false,
		9 * time.Millisecond: false, MinTTL: true, time.Hour: true,
	} {
		if err := CheckTTL(d); (err == nil) != ok {
			t.Errorf("CheckTTL(%v) = %v, want ok=%v", d, err, ok)
		}
	}
}

func TestCheckNumbers(t *testing.T) {
	for _, m := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0.99, -1} {
		if CheckMultiplier(m) == nil {
			t.Errorf("CheckMultiplier(%v) = nil", m)
		}
	}
	for _, j := range []float64{math.NaN(), math.Inf(1), 0, -0.1, 1.01} {
		if CheckJitter(j) == nil {
			t.Errorf("CheckJitter(%v) = nil", j)
		}
	}
	if CheckMultiplier(1) != nil || CheckJitter(1) != nil || CheckJitter(0.5) != nil {
		t.Error("valid values refused")
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"user_digest": "LOCKKIT_TTL_USER_DIGEST", "a-b.c": "LOCKKIT_TTL_A_B_C", "table": "LOCKKIT_TTL_TABLE"} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

// Two different parameters never encode alike, and an encoding never holds
// the bytes that structure a key.
func FuzzAppendParamInjective(f *testing.F) {
	f.Add("a:b", "a%3Ab")
	f.Add("{", "%7B")
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := string(AppendParam(nil, a)), string(AppendParam(nil, b))
		if a != b && ea == eb {
			t.Fatalf("%q and %q both encode to %q", a, b, ea)
		}
		if strings.ContainsAny(ea, ":{}") {
			t.Fatalf("%q encodes to %q", a, ea)
		}
	})
}

// ClusterSlot against the Cluster specification's values (CRC16 of
// "123456789" is 0x31C3) and its hash-tag rules; lockkit's
// TestClusterSlotMatchesServer checks it against CLUSTER KEYSLOT.
func TestClusterSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            0x31C3,
		"foo":                  12182,
		"{123456789}.anything": 0x31C3,
		"x{123456789}y{z}":     0x31C3,
		"lock:{table:12}":      ClusterSlot("table:12"),
	} {
		if got := ClusterSlot(key); got != want {
			t.Errorf("ClusterSlot(%q) = %d, want %d", key, got, want)
		}
	}
	if ClusterSlot("{}123456789") == ClusterSlot("123456789") {
		t.Error("an empty tag must hash the whole key")
	}
	for key, want := range map[string]string{"lock:{table:12}": "table:12", "a{}b": "a{}b", "a{b": "a{b", "{x}{y}": "x"} {
		if got := HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestCheckRenewMarginBoundary: the warning rule ttl − drift − renew ≥ 2 ×
// command timeout, on both sides of its boundary, and the advised TTL passes.
func TestCheckRenewMarginBoundary(t *testing.T) {
	const cmd = 500 * time.Millisecond
	for _, tc := range []struct {
		ttl, renew time.Duration
		ok         bool
	}{
		{time.Second, time.Second / 3, false},                    // room 655ms
		{2 * time.Second, 2 * time.Second / 3, true},             // room 1311ms
		{1512 * time.Millisecond, 485 * time.Millisecond, true},  // room 1009.9ms
		{1510 * time.Millisecond, 495 * time.Millisecond, false}, // room 997.9ms
		{time.Second, -1, true},                                  // never renewed: nothing to warn about
	} {
		err := CheckRenewMargin(tc.ttl, tc.renew, cmd)
		if (err == nil) != tc.ok {
			t.Errorf("CheckRenewMargin(%v, %v, %v) = %v, want ok=%v", tc.ttl, tc.renew, cmd, err, tc.ok)
		}
	}
	err := CheckRenewMargin(time.Second, time.Second/3, cmd)
	if err == nil || !strings.Contains(err.Error(), "use a ttl of at least 1.6s") {
		t.Fatalf("advice: %v", err)
	}
	if err := CheckRenewMargin(1600*time.Millisecond, 1600*time.Millisecond/3, cmd); err != nil {
		t.Errorf("the advised ttl 1.6s at renew ttl/3: %v", err)
	}
}
