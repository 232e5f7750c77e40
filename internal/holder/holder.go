// Package holder defines what a lock key's value holds: the lease token and,
// optionally, a short description of who holds the lease (host, pid, an owner
// name the application sets, the trace and span ids of the hold), so that an
// operator can answer "who holds this lock?" from Redis alone (lockkit
// inspect).
//
// # The value
//
//	value  = token                      no description (what lockkit wrote before)
//	       | token ";" description
//	description = "h=" host "&p=" pid "&o=" owner "&t=" traceid "&s=" spanid
//
// The fields come in that order, each one left out when empty (pid when 0);
// every field value is URL-query escaped (url.QueryEscape), so a description
// holds no ';' and no '&' or '=' inside a field. A description is at most
// MaxDescription bytes: host and owner are cut (on a UTF-8 boundary) to fit
// MaxField escaped bytes each; a trace id that is not 32 lower-case hex
// digits, or is all zeros, is left out, and so is a span id that is not 16
// lower-case hex digits, or is all zeros, or comes without a trace id.
//
// The span id ("s", the hold span's: an election's new term links to it) came
// after v0.1.0, as a field at the end (docs/wire.md, rule 1): v0.1.0's
// Decode ignores it, and v0.1.0 refuses a description longer than its
// MaxDescription, 181 bytes, which is why MaxDescription stays 181 and the
// span id is left out of a description it would take past that (only when
// host and owner are both near MaxField).
//
// The token is the lease's owner id. It must be non-empty and hold no ';'
// (lockkit's tokens are crypto/rand.Text(): 26 characters of A–Z and 2–7).
//
// # The owner check
//
// Release and extend stay exact: a lease owns the lock when the value is its
// token, or its token followed by ';' — never merely a value that starts
// with the token (a token that is a prefix of another token does not own the
// other's lock). OwnsLua is that rule for the scripts, Owns the same in Go.
package holder

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sep separates the token from the description in a lock's value.
const Sep = ';'

// Bounds of a description.
const (
	// MaxField bounds the escaped host and the escaped owner, each.
	MaxField = 64
	// MaxDescription bounds a whole description, escaped: "h=" 64 "&p=" 10
	// "&o=" 64 "&t=" 32 (v0.1.0's bound, kept: the span id fits in what
	// host and owner leave, or is left out).
	MaxDescription = 2 + MaxField + 3 + 10 + 3 + MaxField + 3 + 32
)

// Holder describes who holds a lease.
type Holder struct {
	Host    string // host name (os.Hostname), cut to fit MaxField
	PID     int    // process id; 0: not recorded
	Owner   string // the name the application set on its client, cut to fit MaxField
	TraceID string // the hold's trace id, 32 lower-case hex digits; "" when not traced
	SpanID  string // the hold span's id, 16 lower-case hex digits; "" when not traced
}

// IsZero reports whether h describes nothing.
func (h Holder) IsZero() bool { return h == Holder{} }

// ValidToken reports whether token can start a value: non-empty, no ';'.
func ValidToken(token string) bool {
	return token != "" && strings.IndexByte(token, Sep) < 0
}

// Encode returns the value to store at the lock key for a lease with this
// token held by h: the token alone when h describes nothing, else
// token ";" description. An invalid token (empty, or holding ';') is
// returned as it is, without a description.
func Encode(token string, h Holder) string {
	if !ValidToken(token) {
		return token
	}
	b := make([]byte, 0, len(token)+1+MaxDescription)
	b = append(b, token...)
	b = append(b, Sep)
	n := len(b)
	if b = AppendDescription(b, h); len(b) == n {
		return token
	}
	return string(b)
}

// Value is the lock's value for a lease with this token and a description
// already made by AppendDescription: the token alone when description is "".
func Value(token, description string) string {
	if description == "" || !ValidToken(token) {
		return token
	}
	return token + string(Sep) + description
}

// AppendDescription appends the description of h (without the token and
// ';') to dst; nothing when h describes nothing.
func AppendDescription(dst []byte, h Holder) []byte {
	start := len(dst)
	field := func(name, v string) {
		if v == "" {
			return
		}
		if len(dst) > start {
			dst = append(dst, '&')
		}
		dst = append(dst, name...)
		dst = append(dst, '=')
		dst = append(dst, v...)
	}
	field("h", escapeCut(h.Host, MaxField))
	if h.PID > 0 {
		if len(dst) > start {
			dst = append(dst, '&')
		}
		dst = append(dst, "p="...)
		dst = strconv.AppendInt(dst, int64(h.PID), 10)
	}
	field("o", escapeCut(h.Owner, MaxField))
	if validHex(h.TraceID, 32) {
		field("t", h.TraceID)
		if validHex(h.SpanID, 16) && len(dst)-start+len("&s=")+16 <= MaxDescription {
			field("s", h.SpanID)
		}
	}
	return dst
}

// escapeCut returns url.QueryEscape(s), with s cut on a rune boundary so that
// the result is at most max bytes.
func escapeCut(s string, max int) string {
	e := url.QueryEscape(s)
	if len(e) <= max {
		return e
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		p := url.QueryEscape(s[i : i+n])
		if b.Len()+len(p) > max {
			break
		}
		b.WriteString(p)
		i += n
	}
	return b.String()
}

// validHex reports whether s is n lower-case hex digits, not all zeros: a
// valid trace id (n = 32) or span id (n = 16).
func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	zero := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '0':
		case c >= '1' && c <= '9' || c >= 'a' && c <= 'f':
			zero = false
		default:
			return false
		}
	}
	return !zero
}

// Decode splits a lock's value into its token and holder description. A
// value without ';' is a token alone (the zero Holder). ok is false when the
// value cannot be a lock value (empty, or an empty token) or its description
// is malformed; token is still the part before ';' then, so the lock can be
// shown. Unknown fields are ignored, so a later version may add some.
func Decode(value string) (token string, h Holder, ok bool) {
	i := strings.IndexByte(value, Sep)
	if i < 0 {
		return value, Holder{}, value != ""
	}
	token, desc := value[:i], value[i+1:]
	if token == "" || len(desc) > MaxDescription {
		return token, Holder{}, false
	}
	ok = true
	for desc != "" {
		var f string
		f, desc, _ = strings.Cut(desc, "&")
		name, v, found := strings.Cut(f, "=")
		if !found {
			ok = false
			continue
		}
		u, err := url.QueryUnescape(v)
		if err != nil {
			ok = false
			continue
		}
		switch name {
		case "h":
			h.Host = u
		case "o":
			h.Owner = u
		case "p":
			pid, err := strconv.Atoi(u)
			if err != nil || pid <= 0 {
				ok = false
				continue
			}
			h.PID = pid
		case "t":
			if !validHex(u, 32) {
				ok = false
				continue
			}
			h.TraceID = u
		case "s":
			if !validHex(u, 16) {
				ok = false
				continue
			}
			h.SpanID = u
		}
	}
	return token, h, ok
}

// Owns reports whether the lock value belongs to the lease with this token:
// the value is the token, or the token followed by ';'. It is OwnsLua in Go.
func Owns(value, token string) bool {
	if !ValidToken(token) {
		return false
	}
	return value == token || len(value) > len(token) && value[len(token)] == Sep && value[:len(token)] == token
}

// OwnsLua is the owner check for the runtime's scripts: owns(v, t) is true
// when v, the lock's value as GET returns it (false when the key is
// missing), belongs to the lease whose token is t. Paste it at the top of a
// script and replace `redis.call('GET', KEYS[1]) == ARGV[1]` by
// `owns(redis.call('GET', KEYS[1]), ARGV[1])`.
const OwnsLua = `local function owns(v, t)
  if not v or t == '' or string.find(t, ';', 1, true) then
    return false
  end
  return v == t or string.sub(v, 1, #t + 1) == t .. ';'
end
`
