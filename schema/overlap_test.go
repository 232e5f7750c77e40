package schema

import (
	"errors"
	"fmt"
	"github.com/lockkit/lockkit/internal/policy"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

func mustSegs(t testing.TB, pattern string) []Segment {
	t.Helper()
	segs, errs := parsePattern(pattern)
	if len(errs) > 0 {
		t.Fatalf("parsePattern(%q): %v", pattern, errs)
	}
	return segs
}

func TestOverlap(t *testing.T) {
	tests := []struct {
		a, b    string
		overlap bool
	}{
		{"user:{id}", "user:{name}", true},
		{"user:{id}", "user:{id}:digest", false}, // a string never holds ':'
		{"job:{id:int64}", "job:latest", false},
		{"job:{id}", "job:latest", true},
		{"job:{id:int64}", "job:{n:uint64}", true},
		{"job:{id:uint64}", "job:-1", false},
		{"job:{id:int64}", "job:-1", true},
		{"job:{id:int}", "job:", false}, // an int has at least one digit
		{"job:{id}", "job:", true},      // a string may be empty
		{"a:{x}", "b:{x}", false},
		{"{x}:a", "{x}:b", false},
		{"{x}", "a:b", false},
		{"{x}", "ab", true},
		{"a{x}", "{y}b", true},
		{"t:{a:int}:{b}", "t:{c}:{d:int}", true},
		{"t:{a:int}:x", "t:{c}:{d:int}", false},
		{"cron:{job}:{hour:int64}", "cron:{job}", false},
		{"lock", "lock", true},
		{"n{a:int}", "n1{b:int}", true},
		{"n{a:uint}", "n-{b:int}", false},
	}
	for _, tt := range tests {
		key, got := overlap(mustSegs(t, tt.a), mustSegs(t, tt.b))
		if got != tt.overlap {
			t.Errorf("overlap(%q, %q) = %v (%q), want %v", tt.a, tt.b, got, key, tt.overlap)
			continue
		}
		if got && (!keyRegexp(t, tt.a).MatchString(key) || !keyRegexp(t, tt.b).MatchString(key)) {
			t.Errorf("overlap(%q, %q): example key %q does not fit both", tt.a, tt.b, key)
		}
		if _, back := overlap(mustSegs(t, tt.b), mustSegs(t, tt.a)); back != got {
			t.Errorf("overlap is not symmetric for %q, %q", tt.a, tt.b)
		}
	}
}

func TestAmbiguity(t *testing.T) {
	tests := []struct {
		pattern   string
		ambiguous bool
	}{
		{"a:{x}:{y}", false},
		{"a:{x}{y}", true},
		{"a:{x:int}{y:int}", true},
		{"{x}-{y}", true},
		{"{x:int}-{y:int}", false}, // an int ends at the first non-digit
		{"{x}x{y:int}", false},     // the int holds no 'x': the last 'x' is the literal
		{"{x}x{y}", true},
		{"{x:int}5:{y}", false}, // the ':' fixes where {x} ends
		{"{x:int}5{y:int}", true},
		{"{x:uint}-{y:uint}", false},
		{"{x:int}{y:uint}", true},
		{"x:{a}:y:{b}:{c:int}", false},
		{"plain", false},
		{"{x}", false},
	}
	for _, tt := range tests {
		segs := mustSegs(t, tt.pattern)
		_, _, adjacent := adjacentParams(segs)
		key, params, got := ambiguity(segs)
		if got != tt.ambiguous {
			t.Errorf("ambiguity(%q) = %v (%q), want %v", tt.pattern, got, key, tt.ambiguous)
			continue
		}
		if adjacent && !got {
			t.Errorf("%q has adjacent parameters but is not ambiguous", tt.pattern)
		}
		if got {
			if n := countSplits(segs, key); n < 2 {
				t.Errorf("ambiguity(%q): example %q has %d splits, want >= 2", tt.pattern, key, n)
			}
			if len(params) < 2 {
				t.Errorf("ambiguity(%q): params %v, want at least two", tt.pattern, params)
			}
		}
	}
}

// keyRegexp is an independent model of a pattern's key language.
func keyRegexp(t testing.TB, pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, s := range mustSegs(t, pattern) {
		switch {
		case !s.IsParam():
			b.WriteString(regexp.QuoteMeta(s.Literal))
		case policy.EncodingOf(string(s.Type)) == policy.EncString:
			b.WriteString("[^:{}]*")
		case policy.EncodingOf(string(s.Type)) == policy.EncInt:
			b.WriteString("-?[0-9]+")
		default:
			b.WriteString("[0-9]+")
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// countSplits counts (up to 3) the ways key splits into the pattern's
// segments, by brute force.
func countSplits(segs []Segment, key string) int {
	if len(segs) == 0 {
		if key == "" {
			return 1
		}
		return 0
	}
	s, rest := segs[0], segs[1:]
	if !s.IsParam() {
		if !strings.HasPrefix(key, s.Literal) {
			return 0
		}
		return countSplits(rest, key[len(s.Literal):])
	}
	n := 0
	for end := 0; end <= len(key) && n < 3; end++ {
		if paramFits(policy.EncodingOf(string(s.Type)), key[:end]) {
			n += countSplits(rest, key[end:])
		}
	}
	return min(n, 3)
}

func paramFits(enc policy.Encoding, v string) bool {
	switch enc {
	case policy.EncString:
		return !strings.ContainsAny(v, ":{}")
	case policy.EncInt:
		v = strings.TrimPrefix(v, "-")
	}
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// The automaton searches agree with brute force over every key up to a
// length, on random patterns over a small alphabet. Breadth-first search finds
// the shortest example, so within that length the two must agree exactly.
func TestSearchAgreesWithBruteForce(t *testing.T) {
	const alphabet = "a:1-"
	const maxLen = 6
	var keys []string
	var grow func(prefix string)
	grow = func(prefix string) {
		keys = append(keys, prefix)
		if len(prefix) == maxLen {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			grow(prefix + alphabet[i:i+1])
		}
	}
	grow("")

	rng := rand.New(rand.NewPCG(1, 2))
	types := []string{"", ":int", ":uint64"}
	randomPattern := func() string {
		var b strings.Builder
		params := 0
		for n := 1 + rng.IntN(4); n > 0; n-- {
			if rng.IntN(2) == 0 {
				b.WriteString("{p" + string(rune('a'+params)) + types[rng.IntN(len(types))] + "}")
				params++
			} else {
				for m := 1 + rng.IntN(2); m > 0; m-- {
					b.WriteByte(alphabet[rng.IntN(len(alphabet))])
				}
			}
		}
		return b.String()
	}

	const n = 80
	patterns := make([]string, n)
	segs := make([][]Segment, n)
	member := make([][]bool, n)
	for i := range patterns {
		patterns[i] = randomPattern()
		segs[i] = mustSegs(t, patterns[i])
		re := keyRegexp(t, patterns[i])
		member[i] = make([]bool, len(keys))
		for k, key := range keys {
			member[i][k] = re.MatchString(key)
		}
	}
	var seen [2][2]int // [ambiguity, overlap][false, true]
	for i := 0; i < n; i++ {
		// ambiguity
		brute, bruteFound := "", false
		for _, key := range keys {
			if countSplits(segs[i], key) >= 2 {
				brute, bruteFound = key, true
				break
			}
		}
		key, _, amb := ambiguity(segs[i])
		seen[0][btoi(amb)]++
		if bruteFound && !amb {
			t.Errorf("%q: brute force finds two splits of %q, ambiguity says none", patterns[i], brute)
		}
		if amb && countSplits(segs[i], key) < 2 {
			t.Errorf("%q: ambiguity example %q has fewer than two splits", patterns[i], key)
		}
		if amb && !bruteFound && len(key) <= maxLen {
			t.Errorf("%q: ambiguity example %q is short, yet brute force found none", patterns[i], key)
		}
		// overlap
		for j := 0; j < i; j++ {
			brute, bruteFound := "", false
			for k := range keys {
				if member[i][k] && member[j][k] {
					brute, bruteFound = keys[k], true
					break
				}
			}
			key, ov := overlap(segs[j], segs[i])
			seen[1][btoi(ov)]++
			switch {
			case bruteFound && !ov:
				t.Errorf("%q vs %q: brute force finds %q, overlap says none", patterns[j], patterns[i], brute)
			case ov && !(keyRegexp(t, patterns[i]).MatchString(key) && keyRegexp(t, patterns[j]).MatchString(key)):
				t.Errorf("%q vs %q: example %q does not fit both", patterns[j], patterns[i], key)
			case ov && !bruteFound && len(key) <= maxLen:
				t.Errorf("%q vs %q: example %q is short, yet brute force found none", patterns[j], patterns[i], key)
			}
		}
	}
	// The random patterns must exercise both answers of both searches.
	for what, counts := range seen {
		if counts[0] == 0 || counts[1] == 0 {
			t.Errorf("search %d: %d false and %d true answers; the sample is too narrow", what, counts[0], counts[1])
		}
	}
	t.Logf("ambiguity no/yes %v, overlap no/yes %v", seen[0], seen[1])
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// aliasedDomains is a schema of n domains that are one YAML node reached
// through aliases: tiny to write, and every pair overlaps.
func aliasedDomains(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\npackage: locks\ndefaults: {ttl: 10s}\ndomains:\n  - &d {pattern: \"table:{id}\"}\n")
	for i := 1; i < n; i++ {
		b.WriteString("  - *d\n")
	}
	return []byte(b.String())
}

// TestOverlapOutputIsBounded: 1,000 aliased domains (7 kB of YAML) used to
// print 12.9 MB of errors (every domain listing every earlier one, N²); the
// report is now capped: a few lines, each short, and the same problem at one
// node reported once with its count.
func TestOverlapOutputIsBounded(t *testing.T) {
	for _, n := range []int{300, 1000, 3000} {
		_, err := Parse("lockkit.yaml", aliasedDomains(n))
		var errs Errors
		if !errors.As(err, &errs) {
			t.Fatalf("%d domains: %v, want Errors", n, err)
		}
		text := err.Error()
		if len(errs) > maxErrors+1 || len(text) > 20_000 {
			t.Errorf("%d domains: %d errors, %d bytes of text", n, len(errs), len(text))
		}
		for _, e := range errs {
			if len(e.Msg) > 1000 {
				t.Errorf("%d domains: a %d-byte message: %.200s…", n, len(e.Msg), e.Msg)
			}
		}
		if !strings.Contains(text, fmt.Sprintf("found %d times here", n-1)) {
			t.Errorf("%d domains: the repeated name clash is not grouped with its count:\n%.600s", n, text)
		}
		if !strings.Contains(text, "were not checked for overlaps") || !strings.Contains(text, "more") {
			t.Errorf("%d domains: no cap on overlap messages:\n%.600s", n, text)
		}
	}
}

// TestManyDistinctOverlapsBounded: distinct patterns that all overlap (every
// literal prefix of one parameter) stop being searched after the cap, and
// each message names at most a few other domains.
func TestManyDistinctOverlapsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\npackage: locks\ndefaults: {ttl: 10s}\ndomains:\n")
	for i := range 500 {
		fmt.Fprintf(&b, "  - {pattern: \"{id}x%d\", name: d%d}\n", i, i)
		fmt.Fprintf(&b, "  - {pattern: \"{id}\", name: e%d}\n", i)
	}
	_, err := Parse("lockkit.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("overlapping domains accepted")
	}
	if text := err.Error(); len(text) > 20_000 {
		t.Errorf("%d bytes of errors", len(text))
	}
}
