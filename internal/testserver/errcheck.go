package testserver

import (
	"fmt"

	"github.com/lockkit/lockkit/internal/errcheck"
)

// Every test binary that starts a real server (the fault suites of
// lockkit, postgres, etcd, zookeeper and the fault harness among them)
// fails loudly when lockkit returns an error with a formatting fault, such
// as "%!w(<nil>)": whichever test made it, and whatever it asserted.
func init() {
	errcheck.Watch(func(err error) {
		panic(fmt.Sprintf("lockkit returned an error with a formatting fault (a nil wrapped with %%w?): %q", err.Error()))
	})
}
