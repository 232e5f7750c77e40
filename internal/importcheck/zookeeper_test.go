package importcheck

import (
	"strings"
	"testing"
)

// zkClient is the ZooKeeper client's import path prefix.
const zkClient = "github.com/go-zookeeper/zk"

// TestZooKeeperStaysInItsPackage: package lockkit, the driver seam and the
// light packages link no ZooKeeper client; only package zookeeper does (which
// the test checks too, so that a wrong go list answer cannot pass).
func TestZooKeeperStaysInItsPackage(t *testing.T) {
	for _, pkg := range append([]string{"./driver", "./postgres"}, light...) {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			g := deps(t, pkg)
			for p := range g.imports {
				if p == zkClient || strings.HasPrefix(p, zkClient+"/") {
					t.Fatalf("%s links %s through\n\t%s", pkg, p, strings.Join(g.chain(p), "\n\t→ "))
				}
			}
		})
	}
	if _, ok := deps(t, "./zookeeper").imports[zkClient]; !ok {
		t.Fatalf("./zookeeper does not link %s: is go list answering for the right module?", zkClient)
	}
}
