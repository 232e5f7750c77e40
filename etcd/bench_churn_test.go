package etcd_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkKeyChurn: what a new etcd key per acquisition costs. Each
// iteration runs, in alternating order, lockkit's two transactions (the put
// comparing the lock's whole key range, the delete comparing the key's create
// revision) on one lease, once on a fresh key (a new token, as lockkit's
// acquisitions wrote while their keys were named after their tokens) and
// once on the same key every time (as a long-lived Session's Mutex does, and
// lockkit's acquisitions on a recycled lease, named after it, now do):
//
//	go test ./etcd -run '^$' -bench KeyChurn -benchtime 1000x -count 1
//
// etcd's index keeps a deleted key until the next compaction, and the range
// compare visits each one, so the fresh-key cycle grows dearer with every
// acquisition since then; compare -benchtime 300x with 3000x. Metrics: each
// variant's µs/op and their ratio.
func BenchmarkKeyChurn(b *testing.B) {
	c := testserver.StartEtcd(b, 1)
	cli := newCli(b, c)
	ctx := context.Background()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	cycle := func(lock, k string) {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lock+"\x00").WithRange(lock+"\x01"), "=", 0)).
			Then(clientv3.OpPut(k, "x", clientv3.WithLease(sess.Lease()))).Commit()
		if err != nil || !r.Succeeded {
			b.Fatalf("put %q: %v %v", k, r, err)
		}
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", r.Header.Revision)).Then(clientv3.OpDelete(k)).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	variants := []func(){
		func() { cycle("fresh", "fresh\x00"+rand.Text()) },
		func() { cycle("same", "same\x00token") },
	}
	var total [2]time.Duration
	n := 0
	for b.Loop() {
		for j := range variants {
			k := (n + j) % 2
			start := time.Now()
			variants[k]()
			total[k] += time.Since(start)
		}
		n++
	}
	us := func(k int) float64 { return float64(total[k].Microseconds()) / float64(n) }
	b.ReportMetric(us(0), "fresh-key-us/op")
	b.ReportMetric(us(1), "same-key-us/op")
	b.ReportMetric(us(0)/us(1), "fresh/same")
	b.ReportMetric(0, "ns/op")
}
