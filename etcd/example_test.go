package etcd_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/lockkit"
)

// A Client whose locks live in etcd: give the etcd client every member.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Getenv("ETCD_ENDPOINTS"), ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	client, err := lockkit.New(etcd.New(cli))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	// TTLs on etcd are whole seconds, 2s at least with etcd's defaults.
	table := client.Domain(lockkit.DomainSpec{Name: "table", Policy: lockkit.Policy{TTL: 10 * time.Second, Fencing: true}})
	err = table.Key(16).Literal("table:").String("12").Lock().Do(context.Background(), func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println("fence (the key's create revision):", lease.Fence())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A cluster started with a shorter election timeout keeps shorter leases:
// --election-timeout 500 keeps 1s (ceil(1.5 × 0.5s)).
func ExampleWithMinTTL() {
	var cli *clientv3.Client // your client
	client, err := lockkit.New(etcd.New(cli, etcd.WithMinTTL(time.Second)))
	_, _ = client, err
}
