package etcdkey

import (
	"math"
	"strings"
	"testing"
)

// Names are fixed-width and inside their lock's range, none a prefix of
// another, sorted as their leases; Parse reads both layouts.
func TestLayout(t *testing.T) {
	leases := []int64{1, 0xabc, 1 << 40, math.MaxInt64}
	start, end := Range("k")
	for i, l := range leases {
		n := Name("k", l)
		if len(n) != len("k")+2+hexDigits || n < start || n >= end {
			t.Errorf("Name(k, %x) = %q: not fixed-width in [%q, %q)", l, n, start, end)
		}
		if i > 0 && Name("k", leases[i-1]) >= n {
			t.Errorf("Name(k, %x) sorts before the name of a smaller lease", l)
		}
		for _, m := range leases {
			if m != l && strings.HasPrefix(Name("k", m), n) {
				t.Errorf("%q is a prefix of %q", n, Name("k", m))
			}
		}
	}
	for _, tc := range []struct {
		key, value, token, holder string
		ok                        bool
	}{
		{Name("k", 7), Value("TOK", "h=x&p=1"), "TOK", "h=x&p=1", true},
		{Name("k", 7), Value("TOK", ""), "TOK", "", true},
		{"k\x00OLDTOKEN", "h=y", "OLDTOKEN", "h=y", true}, // token-named
		{Name("k", 7), "no token", "", "", false},
		{"kk\x00OLDTOKEN", "h=y", "", "", false}, // another lock's
	} {
		tok, h, ok := Parse("k", []byte(tc.key), []byte(tc.value))
		if tok != tc.token || h != tc.holder || ok != tc.ok {
			t.Errorf("Parse(%q, %q) = %q, %q, %v; want %q, %q, %v", tc.key, tc.value, tok, h, ok, tc.token, tc.holder, tc.ok)
		}
	}
	if ValidToken("a\x00b") || !ValidToken("ABC234") {
		t.Error("ValidToken: a NUL byte must be refused, base32 accepted")
	}
}
