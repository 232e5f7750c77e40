package lockkit

import (
	"context"
	"testing"
	"time"
)

// BenchmarkTwoKeys compares a 2-key DoAll with two nested Do calls on the
// same keys, uncontended, in one run:
//
//	go test -run '^$' -bench TwoKeys -benchmem ./lockkit/
func BenchmarkTwoKeys(b *testing.B) {
	rdb := benchRedis(b)
	c, err := New(Redis(rdb))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
	x, y := d.Key(8).Literal("acct:").String("x").Lock(), d.Key(8).Literal("acct:").String("y").Lock()
	ctx := context.Background()
	noop := func(context.Context, *Lease) error { return nil }
	b.Run("nested_do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := x.Do(ctx, func(ctx context.Context, _ *Lease) error { return y.Do(ctx, noop) })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("do_all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := DoAll(ctx, func(context.Context, *LeaseSet) error { return nil }, x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
}
