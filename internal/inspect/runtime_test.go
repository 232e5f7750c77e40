package inspect_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/inspect"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/schema"
)

// What the runtime writes is what the inspector reads: a lock held through
// a real lockkit client, with WithOwner, is listed with its decoded
// parameter, its holder (owner, host, pid), its fence and its TTL.
func TestInspectSeesRuntimeHolder(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	f, err := schema.Parse("lockkit.yaml", []byte("version: 1\npackage: p\ndomains:\n  - pattern: \"seat:{id}\"\n    ttl: 30s\n    fencing: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner("checkout-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(lockkit.DomainSpec{Name: "seat", Policy: lockkit.Policy{TTL: 30 * time.Second, Fencing: true}})
	lease, err := d.Key(8).Literal("seat:").String("14B").Lock().TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	rep, err := inspect.New(f).Inspect(t.Context(), rdb, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 1 {
		t.Fatalf("%d locks listed, want 1: %+v", len(rep.Locks), rep.Locks)
	}
	got := rep.Locks[0]
	host, _ := os.Hostname()
	switch {
	case got.Key != lease.Key() || got.Params["id"] != "14B":
		t.Fatalf("listed %s %v, want %s id=14B", got.Key, got.Params, lease.Key())
	case got.Token != lease.Token():
		t.Fatalf("token %q, want the lease's", got.Token)
	case got.Holder == nil || got.Holder.Owner != "checkout-2" || got.Holder.Host != host || got.Holder.PID != os.Getpid():
		t.Fatalf("holder %+v, want checkout-2 on %s, pid %d", got.Holder, host, os.Getpid())
	case got.Fence == nil || *got.Fence != lease.Fence():
		t.Fatalf("fence %v, want %d", got.Fence, lease.Fence())
	case got.TTLMillis <= 0 || got.TTLMillis > 30000:
		t.Fatalf("TTL left %dms", got.TTLMillis)
	}
}
