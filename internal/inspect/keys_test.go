package inspect

import (
	"strconv"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/schema"
)

func loadSchema(t testing.TB) *schema.File {
	t.Helper()
	f, err := schema.Load("testdata/lockkit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func domainNamed(t testing.TB, f *schema.File, name string) *schema.Domain {
	t.Helper()
	for _, d := range f.Domains {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no domain %s in %v", name, f.Domains)
	return nil
}

// refKey builds a key the way the generated code does, with the runtime's own
// encoder (policy.AppendParam, strconv), independently of Decoder.Encode.
// vals holds a string, an int64 or a uint64 for each parameter.
func refKey(f *schema.File, d *schema.Domain, vals []any) string {
	var b []byte
	i := 0
	for _, s := range d.Segments {
		if !s.IsParam() {
			b = append(b, s.Literal...)
			continue
		}
		switch v := vals[i].(type) {
		case string:
			b = policy.AppendParam(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case uint64:
			b = strconv.AppendUint(b, v, 10)
		}
		i++
	}
	return policy.Key(f.Prefix, string(b))
}

func TestDecode(t *testing.T) {
	f := loadSchema(t)
	dec := NewDecoder(f)
	for _, c := range []struct {
		key    string
		domain string // "" when no domain matches
		params string // name=value, space separated
	}{
		{"lock:{table:12}", "table", "id=12"},
		{"lock:{table:}", "table", "id="},
		{"lock:{table:a%3Ab%7B%7D%25%0A}", "table", "id=a:b{}%\n"},
		{"lock:{table:é✓}", "table", "id=é✓"},
		{"lock:{user:9182:digest}", "user_digest", "id=9182"},
		{"lock:{user:-7:digest}", "user_digest", "id=-7"},
		{"lock:{cron:reconcile:480000}", "cron", "job=reconcile hour=480000"},
		{"lock:{job:a%3Ab}", "job", "id=a:b"},
		{"lock:{pair:-5x7x}", "pair", "a=-5 b=7x"},
		{"lock:{slot:4294967295}", "slot", "n=4294967295"},
		{"lock:{edge:a:18446744073709551615:-9223372036854775808}", "edge", "from=a to=18446744073709551615 w=-9223372036854775808"},
		{"lock:{any.x.x}", "bare", "bare=any.x"},
		{"lock:{.x}", "bare", "bare="},
		{"lock:{}", "", ""},
		// Not lock keys of this schema.
		{"lock:{table:12}:fence", "", ""},
		{"lock:{table:12}:q", "", ""},
		{"lock:{table:12}:qd", "", ""},
		{"lock:{table:12", "", ""},
		{"lock:table:12", "", ""},
		{"locks:{table:12}", "", ""},
		{"lock:{table:1:2}", "", ""},       // ':' is always escaped in a parameter
		{"lock:{table:%41}", "", ""},       // 'A' is never escaped
		{"lock:{table:%3a}", "", ""},       // lower-case hex is never written
		{"lock:{table:%3}", "", ""},        // cut escape
		{"lock:{table:a\nb}", "", ""},      // raw control byte
		{"lock:{table:{x}}", "", ""},       // braces
		{"lock:{user:007:digest}", "", ""}, // not canonical
		{"lock:{user:-0:digest}", "", ""},
		{"lock:{user:+7:digest}", "", ""},
		{"lock:{user::digest}", "", ""},
		{"lock:{user:9223372036854775808:digest}", "", ""}, // int64 overflow
		{"lock:{slot:4294967296}", "", ""},                 // uint32 overflow
		{"lock:{slot:-1}", "", ""},
		{"lock:{pair:2147483648x}", "", ""}, // int32 overflow
		{"lock:{cron:reconcile:}", "", ""},
		{"", "", ""},
		{"lock:{" + strings.Repeat("a", MaxKeyLen) + "}", "", ""},
	} {
		d, ps, ok := dec.Decode(c.key)
		if c.domain == "" {
			if ok {
				t.Errorf("Decode(%q) = %s %v, want no match", c.key, d.Name, ps)
			}
			continue
		}
		if !ok || d.Name != c.domain {
			t.Errorf("Decode(%q) = %v, %v, want domain %s", c.key, d, ok, c.domain)
			continue
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Name+"="+p.String())
		}
		if strings.Join(got, " ") != c.params {
			t.Errorf("Decode(%q) params = %q, want %q", c.key, strings.Join(got, " "), c.params)
		}
		if k, err := dec.Encode(d, ps); err != nil || k != c.key {
			t.Errorf("Encode(Decode(%q)) = %q, %v", c.key, k, err)
		}
	}
}

func TestGlob(t *testing.T) {
	f := loadSchema(t)
	dec := NewDecoder(f)
	for _, c := range []struct {
		domain string
		fixed  map[string]string
		want   string
	}{
		{"table", nil, "lock:{table:*}"},
		{"table", map[string]string{"id": "a*b"}, `lock:{table:a\*b}`},
		{"table", map[string]string{"id": ""}, "lock:{table:}"},
		{"cron", map[string]string{"hour": "5"}, "lock:{cron:*:5}"},
		{"edge", nil, "lock:{edge:*:*:*}"},
		{"bare", nil, "lock:{*.x}"},
	} {
		if got := dec.glob(domainNamed(t, f, c.domain), c.fixed); got != c.want {
			t.Errorf("glob(%s, %v) = %q, want %q", c.domain, c.fixed, got, c.want)
		}
	}
	f2 := *f
	f2.Prefix = `a*[b]?\`
	if got := NewDecoder(&f2).globAll(); got != `a\*\[b\]\?\\{*}` {
		t.Errorf("globAll = %q", got)
	}
}

// FuzzKeyRoundTrip: a key the runtime's encoder writes for any parameter
// values decodes to exactly its domain and those values.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add(uint8(0), "12", int64(0), uint64(0))
	f.Add(uint8(2), "re:con{ci}le%", int64(-1), uint64(1))
	f.Add(uint8(4), "7x8", int64(-5), uint64(0))
	f.Add(uint8(6), "", int64(1)<<62, uint64(1)<<63)
	f.Add(uint8(7), "table:1", int64(0), uint64(0))
	sf := loadSchema(f)
	dec := NewDecoder(sf)
	f.Fuzz(func(t *testing.T, which uint8, s string, i int64, u uint64) {
		d := sf.Domains[int(which)%len(sf.Domains)]
		var vals []any
		for k, p := range d.Params() {
			switch p.Type {
			case schema.TypeString:
				vals = append(vals, s+strings.Repeat("'", k)) // distinct strings
			case schema.TypeInt32:
				vals = append(vals, int64(int32(i)))
			case schema.TypeUint32:
				vals = append(vals, uint64(uint32(u)))
			case schema.TypeInt, schema.TypeInt64:
				vals = append(vals, i)
			default:
				vals = append(vals, u)
			}
		}
		key := refKey(sf, d, vals)
		if len(key) > MaxKeyLen {
			return
		}
		got, ps, ok := dec.Decode(key)
		if !ok || got != d {
			t.Fatalf("Decode(%q) = %v, %v; want domain %s", key, got, ok, d.Name)
		}
		for k, p := range ps {
			if p.Value() != vals[k] {
				t.Fatalf("Decode(%q) param %s = %#v, want %#v", key, p.Name, p.Value(), vals[k])
			}
		}
	})
}

// FuzzKeyNothingElse: whatever key Decode accepts is exactly the key the
// runtime's encoder writes for the domain and values it returns, so no other
// byte string is taken for a lock key; derived keys never decode.
func FuzzKeyNothingElse(f *testing.F) {
	for _, k := range []string{"lock:{table:12}", "lock:{user:-7:digest}", "lock:{pair:-5x7x}", "lock:{edge:a:1:2}", "lock:{x%25}", "lock:{table:%3A}"} {
		f.Add(k)
	}
	sf := loadSchema(f)
	dec := NewDecoder(sf)
	f.Fuzz(func(t *testing.T, key string) {
		d, ps, ok := dec.Decode(key)
		if !ok {
			return
		}
		vals := make([]any, len(ps))
		for k, p := range ps {
			vals[k] = p.Value()
		}
		if re := refKey(sf, d, vals); re != key {
			t.Fatalf("Decode(%q) = %s %v, which encodes to %q", key, d.Name, vals, re)
		}
		for _, suf := range []string{":fence", ":q", ":qd", ":qc", ":qp"} {
			if _, _, ok := dec.Decode(key + suf); ok {
				t.Fatalf("derived key %q decodes", key+suf)
			}
		}
	})
}
