package lockkit_test

import (
	"strings"
	"testing"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"

	_ "github.com/lockkit/lockkit/examples/locks" // registers table:{id}, user:{id:int64}:digest, ... under "lock:"
)

// Two schemas in one program whose domains can produce the same key: package
// examples/locks declares table:{id}, and this package declares
// table:{name} under the same default prefix, so both give lock:{table:12}
// and two unrelated locks would exclude each other. New refuses, naming both
// domains and their packages. A domain under its own prefix, or whose keys
// differ, is fine.
func TestNewRefusesOverlapAcrossPackages(t *testing.T) {
	lockkit.RestoreRegisteredAfter(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	lockkit.RegisterDomains(
		lockkit.DomainSpec{Name: "table_by_name", Pattern: "table:{name}"},
		lockkit.DomainSpec{Name: "own_prefix", Pattern: "table:{id}", Prefix: "billing:lock:"},
		lockkit.DomainSpec{Name: "typed", Pattern: "user:{id:int64}:report"},
	)
	c, err := lockkit.New(goredis.New(rdb))
	if err == nil {
		c.Close(t.Context())
		t.Fatal("New accepted two packages' domains that share the key lock:{table:12}")
	}
	t.Log(err)
	for _, want := range []string{
		`domain "table_by_name" (github.com/lockkit/lockkit/lockkit_test, pattern "table:{name}")`,
		`domain "table" (github.com/lockkit/lockkit/examples/locks, pattern "table:{id}")`,
		`can produce the same key, e.g. "lock:{table:a}"`,
		"prefix",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, not := range []string{"own_prefix", "typed"} {
		if strings.Contains(err.Error(), not) {
			t.Errorf("error %q names %q, whose keys differ", err, not)
		}
	}
}
