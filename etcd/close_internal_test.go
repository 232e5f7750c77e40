package etcd

import (
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestCloseRacingRevoke: a lease disposed of by an acquisition still under
// way while the backend closes (its outcome in doubt once Client.Close's
// ctx ended) is revoked, and never races Close's wait for the revokes in
// flight (a WaitGroup's Add concurrent with its Wait: the race detector's
// report, or sync's "WaitGroup misuse" panic).
func TestCloseRacingRevoke(t *testing.T) {
	cli := testClient(t)
	for range 50 {
		be, err := New(cli).Open(driver.Config{CommandTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b := be.(*backend)
		g, err := cli.Grant(t.Context(), 5)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 20 {
				b.revokeLater(clientv3.LeaseID(g.ID))
			}
		})
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		// Revoked, by Close's wait or in line after Close began.
		ttl, err := cli.TimeToLive(t.Context(), g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL != -1 {
			t.Fatalf("lease %x still lives (TTL %ds) after Close and its revokes returned", g.ID, ttl.TTL)
		}
	}
}
