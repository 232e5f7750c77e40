package lockkit

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/rediswire"
)

// BenchmarkAcquireReleasePaired interleaves the raw floor of
// BenchmarkBaselineSetNXEvalsha (SET NX PX, then the EVALSHA
// compare-and-delete) and an uncontended TryAcquire + Release through the
// Client, plain and fencing, in every iteration (order rotated), so that a
// shared machine's drift hits all three alike. It reports each one's median
// µs and the median of the per-iteration ratios to the floor, the figure to
// read on a loaded machine (as postgres's BenchmarkAcquireReleasePaired):
//
//	go test ./lockkit -run '^$' -bench AcquireReleasePaired -benchtime 3000x -count 3
func BenchmarkAcquireReleasePaired(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	c, err := New(goredis.New(rdb))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	plain := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
	fenced := c.Domain(DomainSpec{Name: "bench-fencing", Policy: Policy{TTL: 10 * time.Second, Fencing: true}})
	floorKey := "lock:{bench:baseline}"
	floor := func() {
		token := rand.Text()
		ok, err := rdb.SetNX(ctx, floorKey, token, 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if n, err := rediswire.ReleaseScript.Run(ctx, rdb, []string{floorKey}, token).Int64(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
	through := func(d *Domain) func() {
		return func() {
			// The key is built per cycle, as generated code does.
			lease, err := d.Key(8).Literal("bench:").String("x").Lock().TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ops := []func(){floor, through(plain), through(fenced)}
	for _, op := range ops { // warm: connections dialled, scripts cached
		op()
	}
	var ns [3][]float64
	var ratio [2][]float64
	i := 0
	for b.Loop() {
		var d [3]float64
		for k := range 3 {
			j := (i + k) % 3
			t0 := time.Now()
			ops[j]()
			d[j] = float64(time.Since(t0).Nanoseconds())
		}
		i++
		for j := range 3 {
			ns[j] = append(ns[j], d[j])
		}
		ratio[0] = append(ratio[0], d[1]/d[0])
		ratio[1] = append(ratio[1], d[2]/d[0])
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med(ns[0])/1e3, "floor-µs")
	b.ReportMetric(med(ns[1])/1e3, "lockkit-µs")
	b.ReportMetric(med(ns[2])/1e3, "fencing-µs")
	b.ReportMetric(med(ratio[0]), "lockkit/floor")
	b.ReportMetric(med(ratio[1]), "fencing/floor")
}
