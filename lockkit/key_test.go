package lockkit

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testserver"
)

// unescape inverts policy.AppendParam (KeyBuilder.String); the fuzz test uses it to prove the encoding
// is injective (a left inverse exists) and that decoding needs no context.
func unescape(t testing.TB, enc string) string {
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			b.WriteByte(enc[i])
			continue
		}
		if i+2 >= len(enc) {
			t.Fatalf("truncated escape in %q", enc)
		}
		v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q: %v", enc, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String()
}

func TestAppendParam(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"12", "12"},
		{"a:b", "a%3Ab"},
		{"{x}", "%7Bx%7D"},
		{"100%", "100%25"},
		{"%3A", "%253A"},
		{"ünïcødé 桌", "ünïcødé 桌"},
		{"tab\tnl\n\x7f", "tab%09nl%0A%7F"},
	} {
		if got := string(policy.AppendParam(nil, tc.in)); got != tc.want {
			t.Errorf("policy.AppendParam(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	c := &Client{}
	d := c.Domain(DomainSpec{Name: "user_digest", Policy: Policy{TTL: 1}})
	got := d.Key(0).Literal("user:").Int(-42).Literal(":digest").Lock().Key()
	if want := "lock:{user:-42:digest}"; got != want {
		t.Fatalf("key = %q, want %q", got, want)
	}
	d2 := c.Domain(DomainSpec{Name: "cron", Prefix: "app:", Policy: Policy{TTL: 1}})
	got = d2.Key(0).Literal("cron:").String("nightly:{x}").Literal(":").Uint(7).Lock().Key()
	if want := "app:{cron:nightly%3A%7Bx%7D:7}"; got != want {
		t.Fatalf("key = %q, want %q", got, want)
	}
	if (KeyBuilder{}).Lock() != (Lock{}) {
		t.Fatal("a builder from a nil domain must give the zero Lock")
	}
}

// The builder must not let a later append change a key already handed out.
func TestKeyBuilderReuse(t *testing.T) {
	c := &Client{}
	d := c.Domain(DomainSpec{Name: "t", Policy: Policy{TTL: 1}})
	b := d.Key(64).Literal("t:")
	k1 := b.String("a").Lock().Key()
	_ = b.String("zzzz").Lock()
	if k1 != "lock:{t:a}" {
		t.Fatalf("first key changed to %q", k1)
	}
}

// FuzzKeyInjective: for the two-parameter pattern "x:{a}:{b}", two tuples
// give the same key only if they are the same tuple, and the key decodes
// back to the tuple.
func FuzzKeyInjective(f *testing.F) {
	f.Add("a", "b", "a:b", "")
	f.Add("", ":", ":", "")
	f.Add("%3A", "", ":", "")
	f.Add("{", "}", "%7B", "%7D")
	f.Fuzz(func(t *testing.T, a1, b1, a2, b2 string) {
		key := func(a, b string) []byte {
			k := policy.AppendParam([]byte("x:"), a)
			k = append(k, ':')
			return policy.AppendParam(k, b)
		}
		k1, k2 := key(a1, b1), key(a2, b2)
		if bytes.Equal(k1, k2) != (a1 == a2 && b1 == b2) {
			t.Fatalf("(%q,%q) -> %q and (%q,%q) -> %q", a1, b1, k1, a2, b2, k2)
		}
		if bytes.ContainsAny(k1[2:], "{}") {
			t.Fatalf("key %q holds a brace: it could move the hash tag", k1)
		}
		parts := strings.Split(string(k1), ":")
		if len(parts) != 3 || unescape(t, parts[1]) != a1 || unescape(t, parts[2]) != b1 {
			t.Fatalf("key %q does not decode to (%q,%q)", k1, a1, b1)
		}
	})
}

// A runtime key never has an empty or split hash tag: on a real Cluster,
// CLUSTER KEYSLOT puts every edge key the builder accepts in the same slot
// as its fence counter (and a fenced acquisition is granted), and the
// builder refuses an empty tag ("lock:{}", whose lock and counter land in
// different slots, so every fenced acquire failed with CROSSSLOT) and a
// literal with a brace, with an error naming the key.
func TestKeyHashTagCluster(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	d := testDomain(t, newClientOver(t, cc, WithCommandTimeout(3*time.Second)), Policy{TTL: 5 * time.Second, Fencing: true})
	good := map[string]Lock{
		"one byte":      d.Key(1).String("x").Lock(),
		"zero":          d.Key(1).Int(0).Lock(),
		"escaped brace": d.Key(1).String("}").Lock(),
		"escaped open":  d.Key(1).String("{").Lock(),
		"percent":       d.Key(1).String("%").Lock(),
		"unicode":       d.Key(4).String("é世").Lock(),
		"literal only":  d.Key(3).Literal("all").Lock(),
		"literal colon": d.Key(3).Literal("a:").String("").Lock(),
	}
	for name, l := range good {
		lock, err := cc.ClusterKeySlot(t.Context(), l.Key()).Result()
		if err != nil {
			t.Fatal(err)
		}
		fence, err := cc.ClusterKeySlot(t.Context(), policy.FenceKey(l.Key())).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lock != fence || int(lock) != policy.ClusterSlot(l.Key()) {
			t.Errorf("%s: key %q in slot %d, its counter in %d (ClusterSlot says %d)", name, l.Key(), lock, fence, policy.ClusterSlot(l.Key()))
		}
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Errorf("%s: fenced acquire of %q: %v", name, l.Key(), err)
			continue
		}
		lease.Release(t.Context())
	}
	bad := map[string]struct {
		l    Lock
		want string
	}{
		"empty string":  {d.Key(0).String("").Lock(), "empty hash tag"},
		"nothing":       {d.Key(0).Lock(), "empty hash tag"},
		"literal close": {d.Key(2).Literal("}x").Lock(), "would move its Redis Cluster hash tag"},
		"literal open":  {d.Key(2).Literal("a{").Int(1).Lock(), "would move its Redis Cluster hash tag"},
	}
	for name, c := range bad {
		lease, err := c.l.TryAcquire(t.Context())
		if lease != nil || err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.l.Key()) {
			t.Errorf("%s: acquire of %q = %v, want a refusal saying %q and naming the key", name, c.l.Key(), err, c.want)
		}
		if err := DoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, c.l); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DoAll of %q = %v, want the same refusal", name, c.l.Key(), err)
		}
	}
}
