package etcd_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/benchkit"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// BenchmarkSemaphoreAcquireRelease: one uncontended permit of a 3-permit
// semaphore, TryAcquire + Release through the Client on a 1-member etcd,
// against two hand-written floors, paired iteration by iteration
// (internal/benchkit.Paired):
//
//   - floor: a transaction that puts the permit key (bound to one lease
//     granted for the whole run) if it does not exist, then a delete;
//
//   - floor-lease: the same with a lease of its own per permit (grant, the
//     transaction, revoke, which deletes the key), as lockkit keeps one per
//     acquisition.
//
//     go test ./etcd -run '^$' -bench SemaphoreAcquireRelease -benchtime 2000x -count 3
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	c := testserver.StartEtcd(b, 1)
	cli := newCli(b, c)
	ctx := context.Background()
	lc := newClient(b, c)
	sem := lc.Domain(lockkit.DomainSpec{Name: "bench-sem", Policy: lockkit.Policy{TTL: 10 * time.Second, Kind: "semaphore", Permits: 3}}).
		Key(16).Literal("bench-sem").Semaphore()
	const key = "floor:{sem}:permit:0"
	put := func(lease clientv3.LeaseID) error {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, rand.Text(), clientv3.WithLease(lease))).Commit()
		if err == nil && !resp.Succeeded {
			err = errors.New("the floor's permit key is held")
		}
		return err
	}
	run, err := cli.Grant(ctx, 3600) // outlives the run: nothing renews it
	if err != nil {
		b.Fatal(err)
	}
	benchkit.Paired(b,
		benchkit.Op{Name: "floor", Do: func() error {
			if err := put(run.ID); err != nil {
				return err
			}
			_, err := cli.Delete(ctx, key)
			return err
		}},
		benchkit.Op{Name: "floor-lease", Do: func() error {
			l, err := cli.Grant(ctx, 10)
			if err != nil {
				return err
			}
			if err := put(l.ID); err != nil {
				return err
			}
			_, err = cli.Revoke(ctx, l.ID)
			return err
		}},
		benchkit.Op{Name: "lockkit", Do: func() error {
			lease, err := sem.TryAcquire(ctx)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
	)
}

// BenchmarkElectionTakeover: the time from killing a leader (its etcd
// client closed: no resign, no renewal) to a standby's next term, at a 2 s
// TTL, etcd's shortest here (internal/benchkit.Takeover):
//
//	go test ./etcd -run '^$' -bench ElectionTakeover -benchtime 5x -count 2
func BenchmarkElectionTakeover(b *testing.B) {
	c := testserver.StartEtcd(b, 1)
	const ttl = 2 * time.Second
	standby := benchClient(b, newCli(b, c), ttl)
	benchkit.Takeover(b, ttl, standby, func() benchkit.Client {
		// Quiet: a killed client's retries would log each attempt.
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cli.Close() })
		return benchkit.Client{C: benchClient(b, cli, ttl), Kill: cli.Close}
	})
}

func benchClient(b *testing.B, cli *clientv3.Client, ttl time.Duration) *lockkit.Client {
	b.Helper()
	lc, err := lockkit.New(etcd.New(cli), lockkit.WithLogger(slog.New(slog.DiscardHandler)), benchkit.CommandTimeout(ttl))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lc.Close(ctxT(b, 5*time.Second)) })
	return lc
}
