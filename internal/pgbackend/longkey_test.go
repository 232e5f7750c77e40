package pgbackend_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestLongFencingKeyWait: the queued (AcquireWait) and try forms of the
// long-key fencing statement, on a key just over FenceKeyMax and an
// incompressible 10 kB one: granted, fences strictly increasing, and a
// queued attempt on the held key that times out bumps no fence. Before, a
// key whose row did not fit the primary key's btree failed with SQLSTATE
// 54000.
func TestLongFencingKeyWait(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	ctx := ctxT(t, 30*time.Second)
	if err := pgbackend.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	b1 := newBackend(t, testserver.PgxPool(t, pg.DSN(), 2), pgbackend.Options{})
	b2 := newBackend(t, testserver.PgxPool(t, pg.DSN(), 2), pgbackend.Options{})
	var sb strings.Builder
	for sb.Len() < 10000 {
		sb.WriteString(token())
	}
	for _, key := range []string{strings.Repeat("k", pgbackend.FenceKeyMax+1), sb.String()} {
		var last int64
		for i := range 3 {
			r := req(key, 5*time.Second, true)
			var f int64
			var err error
			if i == 1 {
				f, _, err = b1.AcquireWait(ctx, r, time.Second)
			} else {
				f, err = b1.Acquire(ctx, r)
			}
			if err != nil {
				msg := err.Error()
				t.Fatalf("%d-byte key, attempt %d: …%s", len(key), i, msg[max(0, len(msg)-200):])
			}
			if f <= last {
				t.Fatalf("%d-byte key: fence %d not above %d", len(key), f, last)
			}
			last = f
			if i == 2 {
				if _, _, err := b2.AcquireWait(ctx, req(key, time.Second, true), 20*time.Millisecond); err == nil {
					t.Fatalf("%d-byte key: a second holder was granted", len(key))
				}
				if s := storedFence(t, pool, pgbackend.FenceRowKey(key)); s != f {
					t.Fatalf("%d-byte key: stored fence %d, issued %d", len(key), s, f)
				}
			}
			if ok, err := b1.Release(ctx, key, r.Token); err != nil || !ok {
				t.Fatalf("release: %v %v", ok, err)
			}
		}
		t.Logf("%d-byte key: three fences, the last %d", len(key), last)
	}
}
