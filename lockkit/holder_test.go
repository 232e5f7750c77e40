package lockkit

import (
	"context"
	"crypto/rand"
	"os"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"go.opentelemetry.io/otel/trace"
)

// The owner check of the runtime's own release and extend scripts is exact
// with holder descriptions in the value: a token that is a prefix of the
// holder's, or the holder's token plus a character, owns nothing.
func TestOwnerCheckExactWithHolder(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	tok := rand.Text()
	desc := string(holder.AppendDescription(nil, holder.Holder{Host: "web-1", PID: 7, Owner: "o;x&y=z"}))
	for _, v := range []string{tok, holder.Value(tok, desc)} {
		if err := rdb.Set(ctx, "lock:{k}", v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			token string
			want  int64
		}{
			{"extend, a prefix of the token", tok[:25], 0},
			{"release, a prefix of the token", tok[:25], 0},
			{"release, the token and more", tok + "A", 0},
			{"release, the token and ';'", tok + ";", 0},
			{"extend, the holder", tok, 1},
			{"release, the holder", tok, 1},
		} {
			var got int64
			var err error
			if c.name[:6] == "extend" {
				got, err = rediswire.ExtendScript.Run(ctx, rdb, []string{"lock:{k}"}, c.token, 60000).Int64()
			} else {
				got, err = rediswire.ReleaseScript.Run(ctx, rdb, []string{"lock:{k}"}, c.token).Int64()
			}
			if err != nil || got != c.want {
				t.Fatalf("value %q: %s: %d, %v; want %d", v, c.name, got, err, c.want)
			}
		}
	}
}

// Every acquisition records who holds the lock beside the token, with no
// extra round trip (the value the acquire writes), on the SET NX path and
// the fencing script alike; a traced acquire adds its hold span's trace and
// span ids; the lease
// still releases its lock.
func TestHolderRecorded(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r, WithOwner("billing-7"))
	host, _ := os.Hostname()
	for _, fencing := range []bool{false, true} {
		d := g.c.Domain(DomainSpec{Name: "test", Prefix: "lock:" + t.Name() + ":", Policy: Policy{TTL: 5 * time.Second, Fencing: fencing}})
		l := lockOn(d, "x")
		err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
			v := r.Client(t).Get(ctx, l.Key()).Val()
			tok, who, ok := holder.Decode(v)
			if !ok || tok != lease.Token() {
				t.Fatalf("value %q does not decode to the lease's token %q", v, lease.Token())
			}
			// fn's ctx carries the hold span: its ids are recorded.
			sc := trace.SpanContextFromContext(ctx)
			want := holder.Holder{Host: host, PID: os.Getpid(), Owner: "billing-7", TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String()}
			if who != want {
				t.Fatalf("fencing=%v: holder %+v, want %+v", fencing, who, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := r.Client(t).Exists(t.Context(), l.Key()).Val(); n != 0 {
			t.Fatalf("fencing=%v: the lock was not released", fencing)
		}
	}
}
