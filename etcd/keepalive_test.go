package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testClient is a client of a new 1-member cluster, for the package's
// internal tests.
func testClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c := testserver.StartEtcd(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestKeeperStream: the keep-alives of many leases, live and revoked, sent
// at once on the shared stream each get their own lease's answer; a
// keep-alive on a stream that broke still renews its lease (through the
// client's KeepAliveOnce), and the next one opens a stream again.
func TestKeeperStream(t *testing.T) {
	cli := testClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := newKeeper(cli)
	defer k.close()

	var live, gone []clientv3.LeaseID
	for i := range 16 {
		g, err := cli.Grant(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := cli.Revoke(ctx, g.ID); err != nil {
				t.Fatal(err)
			}
			gone = append(gone, g.ID)
		} else {
			live = append(live, g.ID)
		}
	}
	var wg sync.WaitGroup
	for range 3 { // each lease's keep-alive three times at once
		for _, id := range live {
			wg.Go(func() {
				if err := k.keepAliveOnce(ctx, id); err != nil {
					t.Errorf("keep-alive of live lease %x: %v", id, err)
				}
			})
		}
		for _, id := range gone {
			wg.Go(func() {
				if err := k.keepAliveOnce(ctx, id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
					t.Errorf("keep-alive of revoked lease %x: %v, want %v", id, err, rpctypes.ErrLeaseNotFound)
				}
			})
		}
	}
	wg.Wait()

	k.mu.Lock()
	s := k.cur
	k.mu.Unlock()
	if s == nil {
		t.Fatal("no stream after keep-alives that succeeded")
	}
	s.cancel() // the stream breaks under the keeper
	if err := k.keepAliveOnce(ctx, live[0]); err != nil {
		t.Fatalf("keep-alive on a broken stream: %v", err)
	}
	if err := k.keepAliveOnce(ctx, live[1]); err != nil {
		t.Fatalf("keep-alive after a broken stream: %v", err)
	}
	k.mu.Lock()
	again := k.cur
	k.mu.Unlock()
	if again == nil || again == s {
		t.Fatalf("stream after the break: %p, broken one %p: not opened again", again, s)
	}
}
