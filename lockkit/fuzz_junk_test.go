package lockkit

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// FuzzJunkKeys writes fuzzed junk (a string value, or another Redis type)
// under a lock key, its fence counter or one of its FIFO queue keys on a real
// redis-server (one per fuzz process), then takes the lock once on a fencing
// poll domain and a fencing FIFO domain (issue 31). Each call must return
// within its ctx: a lease whose fence is above an integer the counter held,
// ErrNotAcquired (something is under the lock key), a data error naming the
// counter (driver.ErrFinal, not ErrUnavailable), or, on the FIFO domain only,
// ErrUnavailable with Redis's WRONGTYPE (a lock or queue key of another type). Never a panic, a hang, a
// fence at or below the counter's value, or a junk queue member that keeps
// the lock from a caller.
func FuzzJunkKeys(f *testing.F) {
	for _, s := range []struct {
		where, kind uint8
		v           string
	}{
		{0, 0, "abc"}, {1, 0, "abc"}, {1, 0, "9223372036854775807"}, {1, 0, "4611686018427387904"},
		{1, 1, "x"}, {1, 0, "-5"}, {1, 0, ""}, {2, 2, "x"}, {3, 0, "1"}, {4, 3, "y"}, {5, 0, "z"}, {0, 4, "t"},
	} {
		f.Add(s.where, s.kind, s.v)
	}
	r := testserver.StartRedis(f)
	rdb := r.Client(f)
	c, err := New(goredis.New(rdb), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.Close(context.Background()) })
	poll := c.Domain(DomainSpec{Name: "junk", Prefix: "fuzz:", Policy: Policy{TTL: 2 * time.Second, Fencing: true}})
	fp := fifoPolicy(2*time.Second, 200*time.Millisecond)
	fp.Fencing = true
	queue := c.Domain(DomainSpec{Name: "junkfifo", Prefix: "fuzzq:", Policy: fp})
	suffixes := []string{"", fenceSuffix, fifo.QueueSuffix, fifo.DeadlinesSuffix, fifo.WaitersSuffix, fifo.PreviousSuffix}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, where, kind uint8, v string) {
		id := strconv.FormatInt(n.Add(1), 10) // a fresh key per input
		for _, d := range []*Domain{poll, queue} {
			l := d.Key(len(id) + 3).Literal("id:").String(id).Lock()
			junk := l.Key() + suffixes[int(where)%len(suffixes)]
			bg := context.Background()
			var werr error
			switch kind % 5 {
			case 0:
				werr = rdb.Set(bg, junk, v, 0).Err()
			case 1:
				werr = rdb.HSet(bg, junk, "f", v).Err()
			case 2:
				werr = rdb.RPush(bg, junk, v).Err()
			case 3:
				werr = rdb.SAdd(bg, junk, v).Err()
			default:
				werr = rdb.ZAdd(bg, junk, redis.Z{Score: float64(len(v)), Member: v}).Err()
			}
			if werr != nil {
				t.Fatal(werr)
			}
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			lease, err := l.TryAcquire(ctx)
			hung := ctx.Err() != nil
			cancel()
			switch {
			case hung:
				t.Fatalf("%s junk under %s: the call ran to its ctx's end: %v", l.Key(), junk, err)
			case err == nil:
				if before, perr := strconv.ParseInt(v, 10, 64); perr == nil && junk == l.Key()+fenceSuffix && kind%5 == 0 && lease.Fence() <= before {
					t.Fatalf("fence %d over a counter of %d", lease.Fence(), before)
				}
				if lease.Fence() <= 0 {
					t.Fatalf("fence %d", lease.Fence())
				}
				_ = lease.Release(bg)
			case errors.Is(err, ErrNotAcquired):
				// Junk under the lock key holds it. A member of the FIFO
				// queue without a live waiter's deadline and :qc entry is
				// dropped from the head, never a waiter ahead for good.
				if junk != l.Key() {
					t.Fatalf("junk under %s, not the lock key: %v", junk, err)
				}
			case errors.Is(err, driver.ErrFinal) && !errors.Is(err, ErrUnavailable):
				if junk != l.Key()+fenceSuffix {
					t.Fatalf("a data error with junk under %s: %v", junk, err)
				}
			case errors.Is(err, ErrUnavailable):
				if junk == l.Key()+fenceSuffix || d == poll || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Fatalf("ErrUnavailable with junk under %s: %v", junk, err)
				}
			default:
				t.Fatalf("junk under %s: an error of no documented kind: %v", junk, err)
			}
			_ = rdb.Del(bg, junk).Err()
		}
	})
}
