package inspect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/schema"
)

// MaxKeyLen bounds the keys Decode looks at; a longer key is no lock of the
// schema as far as the inspector is concerned.
const MaxKeyLen = 16 << 10

// Param is one decoded parameter of a lock key.
type Param struct {
	Name string
	Type schema.ParamType
	// Str is the value of a string parameter, unescaped; Int and Uint hold
	// an integer parameter's value, by its type's Encoding.
	Str  string
	Int  int64
	Uint uint64
}

// Value returns the parameter as JSON shows it: a string, an int64 or a uint64.
func (p Param) Value() any {
	switch policy.EncodingOf(string(p.Type)) {
	case policy.EncInt:
		return p.Int
	case policy.EncUint:
		return p.Uint
	}
	return p.Str
}

// String is the parameter's value as text: the string itself, or the
// integer in decimal.
func (p Param) String() string {
	switch policy.EncodingOf(string(p.Type)) {
	case policy.EncInt:
		return strconv.FormatInt(p.Int, 10)
	case policy.EncUint:
		return strconv.FormatUint(p.Uint, 10)
	}
	return p.Str
}

// Decoder maps lock keys back to their domain and parameters, the inverse
// of the runtime's key encoding (lockkit/key.go) for one schema.
type Decoder struct {
	prefix  string
	domains []*schema.Domain
}

// NewDecoder returns the Decoder of f's domains.
func NewDecoder(f *schema.File) *Decoder {
	return &Decoder{prefix: f.Prefix, domains: f.Domains}
}

// Decode returns the domain whose pattern produced key, and the parameters
// it was built from, in pattern order. ok is false when no domain of the
// schema produces key: a derived key (key:fence, key:q...), another
// prefix, a parameter that the runtime would have encoded otherwise ("%41",
// "007", "-0", an int32 out of range...). Encoding what Decode returns gives
// key back, byte for byte.
func (d *Decoder) Decode(key string) (dom *schema.Domain, params []Param, ok bool) {
	inner, ok := d.inner(key)
	if !ok {
		return nil, nil, false
	}
	for _, dm := range d.domains {
		if ps, ok := matchDomain(inner, dm.Segments); ok {
			return dm, ps, true
		}
	}
	return nil, nil, false
}

// DecodeIn is Decode limited to one domain.
func (d *Decoder) DecodeIn(dom *schema.Domain, key string) ([]Param, bool) {
	inner, ok := d.inner(key)
	if !ok {
		return nil, false
	}
	return matchDomain(inner, dom.Segments)
}

// inner returns the suffix of prefix{suffix}.
func (d *Decoder) inner(key string) (string, bool) {
	if len(key) > MaxKeyLen || len(key) < len(d.prefix)+2 ||
		!strings.HasPrefix(key, d.prefix) || key[len(d.prefix)] != policy.TagOpen || key[len(key)-1] != policy.TagClose {
		return "", false
	}
	return key[len(d.prefix)+1 : len(key)-1], true
}

// Encode builds the key of dom with these parameter values (in pattern
// order), as the runtime does.
func (d *Decoder) Encode(dom *schema.Domain, params []Param) (string, error) {
	var b []byte
	i := 0
	for _, s := range dom.Segments {
		if !s.IsParam() {
			b = append(b, s.Literal...)
			continue
		}
		if i >= len(params) {
			return "", fmt.Errorf("domain %s: missing parameter %s", dom.Name, s.Param)
		}
		b = appendParam(b, s.Type, params[i])
		i++
	}
	if i != len(params) {
		return "", fmt.Errorf("domain %s: %d parameters, want %d", dom.Name, len(params), i)
	}
	return policy.Key(d.prefix, string(b)), nil
}

func appendParam(b []byte, t schema.ParamType, p Param) []byte {
	switch policy.EncodingOf(string(t)) {
	case policy.EncInt:
		return strconv.AppendInt(b, p.Int, 10)
	case policy.EncUint:
		return strconv.AppendUint(b, p.Uint, 10)
	}
	return policy.AppendParam(b, p.Str)
}

// matchDomain splits inner into segs: literals verbatim, parameters as the
// runtime encodes them. The schema guarantees at most one split; the search
// backtracks, remembering dead ends, so it stays polynomial on any input.
func matchDomain(inner string, segs []schema.Segment) ([]Param, bool) {
	m := matcher{s: inner, segs: segs}
	params := make([]Param, 0, len(segs))
	if !m.match(0, 0, &params) {
		return nil, false
	}
	return params, true
}

type matcher struct {
	s    string
	segs []schema.Segment
	dead map[[2]int]bool
}

func (m *matcher) match(si, pos int, out *[]Param) bool {
	if si == len(m.segs) {
		return pos == len(m.s)
	}
	if m.dead[[2]int{si, pos}] {
		return false
	}
	seg := m.segs[si]
	if !seg.IsParam() {
		if strings.HasPrefix(m.s[pos:], seg.Literal) && m.match(si+1, pos+len(seg.Literal), out) {
			return true
		}
		m.fail(si, pos)
		return false
	}
	// Candidate ends of the parameter, shortest first; when a literal
	// follows, only where it starts.
	next := ""
	if si+1 < len(m.segs) && !m.segs[si+1].IsParam() {
		next = m.segs[si+1].Literal
	}
	last := si+1 == len(m.segs)
	n := len(*out)
	try := func(end int) bool {
		if last && end != len(m.s) || next != "" && !strings.HasPrefix(m.s[end:], next) {
			return false
		}
		p, ok := parseParam(seg, m.s[pos:end])
		if !ok {
			return false
		}
		*out = append((*out)[:n], p)
		if m.match(si+1, end, out) {
			return true
		}
		*out = (*out)[:n]
		return false
	}
	if policy.EncodingOf(string(seg.Type)) == policy.EncString {
		// Every boundary between encoded units up to the first byte that
		// an encoded string cannot hold.
		for end := pos; ; {
			if try(end) {
				return true
			}
			if end == len(m.s) {
				break
			}
			w := unitLen(m.s, end)
			if w == 0 {
				break
			}
			end += w
		}
	} else {
		end := pos
		if end < len(m.s) && m.s[end] == '-' && policy.EncodingOf(string(seg.Type)) == policy.EncInt {
			end++
		}
		for end < len(m.s) && m.s[end] >= '0' && m.s[end] <= '9' {
			end++
			if try(end) {
				return true
			}
		}
	}
	m.fail(si, pos)
	return false
}

func (m *matcher) fail(si, pos int) {
	if m.dead == nil {
		m.dead = map[[2]int]bool{}
	}
	m.dead[[2]int{si, pos}] = true
}

// unitLen is the length of the encoded unit at s[i] of a string parameter:
// 1 for a byte kept as it is, 3 for %XX of a byte the runtime escapes, 0 when
// no encoded string holds s[i] there.
func unitLen(s string, i int) int {
	c := s[i]
	if c != '%' {
		if policy.NeedsEscape(c) {
			return 0
		}
		return 1
	}
	if i+2 >= len(s) {
		return 0
	}
	hi, lo := unhex(s[i+1]), unhex(s[i+2])
	if hi < 0 || lo < 0 || !policy.NeedsEscape(byte(hi<<4|lo)) {
		return 0
	}
	return 3
}

// unhex is the value of an upper-case hex digit, or -1.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseParam decodes one encoded parameter; false unless the runtime would
// have written exactly enc for the value.
func parseParam(seg schema.Segment, enc string) (Param, bool) {
	p := Param{Name: seg.Param, Type: seg.Type}
	switch policy.EncodingOf(string(seg.Type)) {
	case policy.EncInt:
		v, err := strconv.ParseInt(enc, 10, bitSize(seg.Type))
		if err != nil || strconv.FormatInt(v, 10) != enc {
			return p, false
		}
		p.Int = v
	case policy.EncUint:
		v, err := strconv.ParseUint(enc, 10, bitSize(seg.Type))
		if err != nil || strconv.FormatUint(v, 10) != enc {
			return p, false
		}
		p.Uint = v
	default:
		b := make([]byte, 0, len(enc))
		for i := 0; i < len(enc); {
			switch unitLen(enc, i) {
			case 1:
				b = append(b, enc[i])
				i++
			case 3:
				b = append(b, byte(unhex(enc[i+1])<<4|unhex(enc[i+2])))
				i += 3
			default:
				return p, false
			}
		}
		p.Str = string(b)
	}
	return p, true
}

// bitSize of an integer type; int and uint are taken as 64 bits, whatever
// platform wrote the key.
func bitSize(t schema.ParamType) int {
	switch t {
	case schema.TypeInt32, schema.TypeUint32:
		return 32
	}
	return 64
}

// globEscape quotes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// glob is the SCAN MATCH pattern for the keys of dom whose parameters have
// the values in fixed (by name, already encoded); other parameters are '*'.
// It ends with '}', so derived keys (key:fence, key:q...) never match.
func (d *Decoder) glob(dom *schema.Domain, fixed map[string]string) string {
	var b strings.Builder
	star := false
	for _, s := range dom.Segments {
		v, isFixed := fixed[s.Param]
		switch {
		case !s.IsParam():
			b.WriteString(globEscape(s.Literal))
			star = false
		case isFixed:
			b.WriteString(globEscape(v))
			star = false
		case !star:
			b.WriteByte('*')
			star = true
		}
	}
	return policy.Key(globEscape(d.prefix), b.String())
}

// globAll matches every lock key under the prefix.
func (d *Decoder) globAll() string { return globEscape(d.prefix) + "{*}" }
