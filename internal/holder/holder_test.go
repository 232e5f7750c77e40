package holder

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lockkit/lockkit/internal/testserver"
)

const (
	trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	span  = "00f067aa0ba902b7"
)

func TestEncode(t *testing.T) {
	tok := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for _, c := range []struct {
		h    Holder
		want string
	}{
		{Holder{}, tok},
		{Holder{Host: "web-1", PID: 4242, Owner: "billing", TraceID: trace},
			tok + ";h=web-1&p=4242&o=billing&t=" + trace},
		{Holder{Host: "web-1", PID: 4242, Owner: "billing", TraceID: trace, SpanID: span},
			tok + ";h=web-1&p=4242&o=billing&t=" + trace + "&s=" + span},
		{Holder{SpanID: span}, tok}, // a span id without a trace id
		{Holder{TraceID: trace, SpanID: strings.Repeat("0", 16)}, tok + ";t=" + trace}, // invalid: all zeros
		{Holder{TraceID: trace, SpanID: "00F067AA0BA902B7"}, tok + ";t=" + trace},      // invalid: upper case
		{Holder{PID: 7}, tok + ";p=7"},
		{Holder{PID: -3}, tok},
		{Holder{Owner: "a;b&c=d e%"}, tok + ";o=a%3Bb%26c%3Dd+e%25"},
		{Holder{TraceID: strings.Repeat("0", 32)}, tok},                                      // invalid: all zeros
		{Holder{TraceID: strings.ToUpper(trace)}, tok},                                       // invalid: upper case
		{Holder{Host: "h", TraceID: "abc"}, tok + ";h=h"},                                    // invalid: short
		{Holder{Owner: strings.Repeat("é", 40)}, tok + ";o=" + strings.Repeat("%C3%A9", 10)}, // cut on a rune: 60 of 64 bytes
	} {
		if got := Encode(tok, c.h); got != c.want {
			t.Errorf("Encode(%+v) = %q, want %q", c.h, got, c.want)
		}
	}
	// An invalid token gets no description.
	for _, bad := range []string{"", "A;B"} {
		if got := Encode(bad, Holder{Host: "x"}); got != bad {
			t.Errorf("Encode(%q) = %q, want it unchanged", bad, got)
		}
	}
	// The longest description stays within MaxDescription, v0.1.0's 181
	// bytes (docs/wire.md rule 1: a longer one is malformed to v0.1.0's
	// lockkit inspect): the span id is left out of it.
	if MaxDescription != 181 {
		t.Errorf("MaxDescription = %d, want v0.1.0's 181", MaxDescription)
	}
	long := Holder{Host: strings.Repeat("%", 500), PID: 1<<31 - 1, Owner: strings.Repeat("\xff", 500), TraceID: trace, SpanID: span}
	v := Encode(tok, long)
	if d := len(v) - len(tok) - 1; d > MaxDescription || d < MaxDescription-5 {
		t.Errorf("longest description is %d bytes, want at most %d (and close to it): %q", d, MaxDescription, v)
	}
	if strings.Contains(v, "&s=") {
		t.Errorf("the longest description kept its span id past %d bytes: %q", MaxDescription, v)
	}
	// A usual one keeps it.
	h := Holder{Host: strings.Repeat("h", 40), PID: 1<<31 - 1, Owner: strings.Repeat("o", 40), TraceID: trace, SpanID: span}
	if _, got, ok := Decode(Encode(tok, h)); !ok || got != h {
		t.Errorf("Decode(Encode(%+v)) = %+v, %v", h, got, ok)
	}
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		v     string
		token string
		h     Holder
		ok    bool
	}{
		{"TOKEN", "TOKEN", Holder{}, true},
		{"", "", Holder{}, false},
		{"TOKEN;", "TOKEN", Holder{}, true},
		{";h=x", "", Holder{}, false},
		{"T;h=web&p=12&o=a%3Bb&t=" + trace, "T", Holder{Host: "web", PID: 12, Owner: "a;b", TraceID: trace}, true},
		{"T;o=x&z=future", "T", Holder{Owner: "x"}, true},
		{"T;t=" + trace + "&s=" + span, "T", Holder{TraceID: trace, SpanID: span}, true},
		{"T;t=" + trace + "&s=00f067aa", "T", Holder{TraceID: trace}, false},
		{"T;p=abc&o=x", "T", Holder{Owner: "x"}, false},
		{"T;p=-1", "T", Holder{}, false},
		{"T;h=%zz", "T", Holder{}, false},
		{"T;garbage", "T", Holder{}, false},
		{"T;t=xyz", "T", Holder{}, false},
		{"T;h=a;b", "T", Holder{Host: "a;b"}, true},                // a raw ';' after the first is the description's
		{"T;" + strings.Repeat("h=x&", 100), "T", Holder{}, false}, // too long
	} {
		token, h, ok := Decode(c.v)
		if token != c.token || h != c.h || ok != c.ok {
			t.Errorf("Decode(%q) = %q, %+v, %v; want %q, %+v, %v", c.v, token, h, ok, c.token, c.h, c.ok)
		}
	}
}

// checkRoundTrip checks Decode(Encode(token, h)) against what Encode keeps of h.
func checkRoundTrip(t *testing.T, token string, h Holder) {
	v := Encode(token, h)
	if !ValidToken(token) {
		if v != token {
			t.Fatalf("Encode(%q) with an invalid token = %q", token, v)
		}
		return
	}
	if !Owns(v, token) {
		t.Fatalf("Owns(Encode(%q, %+v) = %q, token) = false", token, h, v)
	}
	if len(v) > len(token)+1+MaxDescription {
		t.Fatalf("value %q longer than token + 1 + %d", v, MaxDescription)
	}
	gotTok, got, ok := Decode(v)
	if !ok || gotTok != token {
		t.Fatalf("Decode(%q) = %q, %+v, %v; want token %q", v, gotTok, got, ok, token)
	}
	if !strings.HasPrefix(h.Host, got.Host) || !strings.HasPrefix(h.Owner, got.Owner) {
		t.Fatalf("Decode(Encode(%+v)) = %+v: host or owner is not a prefix of the original", h, got)
	}
	for _, f := range [][2]string{{h.Host, got.Host}, {h.Owner, got.Owner}} {
		if len(f[0]) <= MaxField/3 && f[0] != f[1] {
			t.Fatalf("Decode(Encode(%+v)) = %+v: a short field was cut", h, got)
		}
		if utf8.ValidString(f[0]) && !utf8.ValidString(f[1]) {
			t.Fatalf("Decode(Encode(%+v)) = %+v: cut inside a rune", h, got)
		}
	}
	wantPID := h.PID
	if wantPID < 0 {
		wantPID = 0
	}
	wantTrace, wantSpan := "", ""
	if validHex(h.TraceID, 32) {
		wantTrace = h.TraceID
		if validHex(h.SpanID, 16) && !strings.Contains(v, "&s=") {
			// Left out only when it would pass MaxDescription.
			if len(v)-len(token)-1+len("&s=")+16 <= MaxDescription {
				t.Fatalf("Encode(%+v) = %q left out a span id that fits", h, v)
			}
		} else {
			wantSpan = h.SpanID
		}
		if !validHex(h.SpanID, 16) {
			wantSpan = ""
		}
	}
	if got.PID != wantPID || got.TraceID != wantTrace || got.SpanID != wantSpan {
		t.Fatalf("Decode(Encode(%+v)) = %+v", h, got)
	}
	// Another token never owns it, in particular one that extends or shortens it.
	for _, other := range []string{token + "A", token[:len(token)-1], "Z" + token} {
		if other != "" && Owns(v, other) {
			t.Fatalf("Owns(%q, %q) = true", v, other)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "web-1", 4242, "billing", trace, span)
	f.Add("A", "", 0, "", "", "")
	f.Add("A;B", "h", 1, "o", trace, "")
	f.Add("T", strings.Repeat("é", 50), -1, "a;b&c=d\x00\xff", strings.ToUpper(trace), span)
	f.Add("T", strings.Repeat("h", 64), 1<<31-1, strings.Repeat("o", 64), trace, span)
	f.Fuzz(func(t *testing.T, token, host string, pid int, owner, traceID, spanID string) {
		checkRoundTrip(t, token, Holder{Host: host, PID: pid, Owner: owner, TraceID: traceID, SpanID: spanID})
	})
}

// FuzzDecode: Decode never panics, the token it accepts owns the value, and
// what it decodes encodes back to the same holder (host and owner possibly cut).
func FuzzDecode(f *testing.F) {
	f.Add("T;h=web&p=12&o=a%3Bb&t=" + trace)
	f.Add("T;t=" + trace + "&s=" + span)
	f.Add("T;;;")
	f.Add(";")
	f.Fuzz(func(t *testing.T, v string) {
		token, h, ok := Decode(v)
		if ok && !Owns(v, token) {
			t.Fatalf("Decode(%q) = %q, ok, but the token does not own the value", v, token)
		}
		if ok {
			// Encode may cut a field that Decode took as it came, and
			// leave out the span id (without a trace id, or past
			// MaxDescription once re-escaped).
			_, h2, ok2 := Decode(Encode(token, h))
			if !ok2 || h2.PID != h.PID || h2.TraceID != h.TraceID || h2.SpanID != h.SpanID && h2.SpanID != "" ||
				!strings.HasPrefix(h.Host, h2.Host) || !strings.HasPrefix(h.Owner, h2.Owner) {
				t.Fatalf("Decode(%q) = %+v; re-encoded, it decodes to %+v, %v", v, h, h2, ok2)
			}
		}
	})
}

// TestOwnsLuaOnRedis runs OwnsLua on a real redis-server against tricky
// values, and checks Owns agrees with it on every one.
func TestOwnsLuaOnRedis(t *testing.T) {
	testserver.RequireRedis(t)
	rdb := testserver.StartRedis(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const missing = "\x00missing"
	tok := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	type tc struct {
		value, token string
		want         bool
	}
	cases := []tc{
		{tok, tok, true},
		{tok + ";h=web", tok, true},
		{tok + ";", tok, true},              // empty description
		{tok + ";h=a;b", tok, true},         // ';' inside the description
		{tok + ";h=a%3Bb", tok, true},       // escaped ';'
		{tok + "A", tok, false},             // the token is a prefix of another token
		{tok + "A;h=web", tok, false},       // ... which carries a description
		{tok, tok + "A", false},             // a longer token
		{tok[:25] + ";h=x", tok[:25], true}, // 25 characters own their own value
		{tok + ";h=x", tok[:25], false},     // ... not the 26-character one's
		{tok[:25], tok, false},
		{"", tok, false},
		{";", "", false}, // an empty token owns nothing
		{"", "", false},
		{tok + ";h=x", tok + ";h", false}, // a "token" holding ';' owns nothing
		{tok + ";h=x", tok + ";", false},
		{missing, tok, false}, // no key
		{"%" + tok, tok, false},
		{strings.ToLower(tok), tok, false},
		{tok + "\x00;", tok, false},
		{tok + ";\x00\xff", tok, true},
	}
	// And random ones: tokens, prefixes of each other, with and without descriptions.
	for range 200 {
		a := rand.Text()
		b := a[:1+int(a[0])%25]
		h := Encode(a, Holder{Host: "h", PID: int(a[1]), Owner: a[2:5]})
		cases = append(cases, tc{a, a, true}, tc{h, a, true}, tc{h, b, false}, tc{a, b, false}, tc{b, a, false}, tc{b + ";x", b, true})
	}
	script := OwnsLua + "return owns(redis.call('GET', KEYS[1]), ARGV[1]) and 1 or 0"
	pipe := rdb.Pipeline()
	for i, c := range cases {
		key := fmt.Sprintf("k%d", i)
		if c.value != missing {
			pipe.Set(ctx, key, c.value, 0)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		got, err := rdb.Eval(ctx, script, []string{fmt.Sprintf("k%d", i)}, c.token).Int()
		if err != nil {
			t.Fatalf("EVAL case %d: %v", i, err)
		}
		if (got == 1) != c.want {
			t.Errorf("Lua owns(%q, %q) = %v, want %v", c.value, c.token, got == 1, c.want)
		}
		v := c.value
		if v == missing {
			continue
		}
		if Owns(v, c.token) != c.want {
			t.Errorf("Owns(%q, %q) = %v, want %v", v, c.token, !c.want, c.want)
		}
	}
}
