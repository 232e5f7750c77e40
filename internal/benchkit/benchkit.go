// Package benchkit holds the loops that the backends' benchmarks share: a
// paired run of an operation against its hand-written floor, and the time a
// standby takes to lead after the leader is killed. It is imported by
// _test.go files only.
package benchkit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/lockkit"
)

// Op is one operation of a paired run.
type Op struct {
	Name string
	Do   func() error
}

// Paired runs every op once per iteration, in a rotating order, so that a
// shared machine's drift weighs on all alike, and reports each op's median
// µs ("<name>-µs") and the median of its per-iteration ratio to the first op,
// the floor ("<name>/<floor>"). Each op runs a few times first, to warm.
func Paired(b *testing.B, ops ...Op) {
	for range 3 {
		for _, op := range ops {
			if err := op.Do(); err != nil {
				b.Fatalf("%s: %v", op.Name, err)
			}
		}
	}
	ns := make([][]float64, len(ops))
	ratio := make([][]float64, len(ops))
	d := make([]float64, len(ops))
	i := 0
	for b.Loop() {
		for k := range ops {
			j := (i + k) % len(ops)
			t0 := time.Now()
			if err := ops[j].Do(); err != nil {
				b.Fatalf("%s: %v", ops[j].Name, err)
			}
			d[j] = float64(time.Since(t0).Nanoseconds())
		}
		i++
		for j := range ops {
			ns[j] = append(ns[j], d[j])
			ratio[j] = append(ratio[j], d[j]/d[0])
		}
	}
	b.ReportMetric(0, "ns/op")
	for j, op := range ops {
		b.ReportMetric(median(ns[j])/1e3, op.Name+"-µs")
		if j > 0 {
			b.ReportMetric(median(ratio[j]), op.Name+"/"+ops[0].Name)
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// Client is a lockkit client on a store connection of its own, and how to
// kill it: cut that connection, so that the client neither renews nor
// releases what it holds, as a crashed process leaves it.
type Client struct {
	C    *lockkit.Client
	Kill func() error
}

// Takeover measures, per iteration, the time from killing a leader to the
// next term on the election its Election returns: a fresh leader (newLeader)
// leads, a standby client campaigns (Lead) until it has lost a round, the
// leader is killed ttl/5 into its term (before its first renewal, at ttl/3),
// and the standby's term starts. It reports the median and the largest time
// from the kill to the next term ("takeover-ms", "takeover-max-ms": about
// TTL − ttl/5, as the dead leader's key lives a TTL from its grant), the
// median time from the dead leader's term start to the next term less the
// TTL ("past-ttl-ms": what detection adds to the lease), and the TTL they
// ran under ("ttl-ms"). Make the clients with CommandTimeout(ttl).
func Takeover(b *testing.B, ttl time.Duration, standby *lockkit.Client, newLeader func() Client) {
	ctx := b.Context()
	var took, past []float64
	for b.Loop() {
		b.StopTimer() // the clock is the metric, not b's
		leader := newLeader()
		ld, sb := election(leader.C, ttl), election(standby, ttl)
		leading, done := make(chan time.Time, 1), make(chan error, 2)
		var wg sync.WaitGroup
		wg.Go(func() {
			//lockkit-vet:ignore the term writes nowhere: it only waits to be lost
			done <- ld.Lead(ctx, func(ctx context.Context, _ *lockkit.Term) error {
				leading <- time.Now()
				<-ctx.Done() // until the term is lost
				return nil
			})
		})
		began := <-leading
		started := make(chan time.Time, 1)
		wg.Go(func() {
			//lockkit-vet:ignore the term writes nowhere: it only records when it began
			done <- sb.Lead(ctx, func(context.Context, *lockkit.Term) error {
				started <- time.Now()
				return nil
			})
		})
		// Let the standby campaign and lose a round before the kill.
		time.Sleep(ttl / 5)
		killed := time.Now()
		if err := leader.Kill(); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, lockkit.ErrLockLost) && !errors.Is(err, lockkit.ErrClosed) {
				b.Fatalf("Lead: %v", err)
			}
		}
		next := <-started
		took = append(took, ms(next.Sub(killed)))
		past = append(past, ms(next.Sub(began)-ttl))
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = leader.C.Close(cctx) // it holds nothing now; its store is cut
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(took), "takeover-ms")
	b.ReportMetric(slices.Max(took), "takeover-max-ms")
	b.ReportMetric(median(past), "past-ttl-ms")
	b.ReportMetric(float64(ttl.Milliseconds()), "ttl-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// CommandTimeout is the command timeout of Takeover's clients: a renewal
// fits in it under the TTL, as in driver/drivertest's handover case.
func CommandTimeout(ttl time.Duration) lockkit.Option { return lockkit.WithCommandTimeout(ttl / 5) }

// election is Takeover's election on c: TTL ttl (renewed every ttl/3, the
// default), candidates polling every 10–50 ms within a round of 3 attempts.
func election(c *lockkit.Client, ttl time.Duration) lockkit.Election {
	p := lockkit.Policy{TTL: ttl, Kind: "election", Retry: lockkit.Retry{Attempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	return c.Domain(lockkit.DomainSpec{Name: "bench-leader", Policy: p}).Key(16).Literal("bench-leader").Election()
}
