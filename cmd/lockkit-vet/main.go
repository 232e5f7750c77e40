// Command lockkit-vet reports misuse of lockkit locks and leases: leases
// not released on every path, the wrong context inside a Do fn, discarded
// errors, leases used after Release, and fencing locks whose fn never reads
// the fence. The checks are documented in package
// github.com/lockkit/lockkit/vet.
//
// Run it on its own:
//
//	go run github.com/lockkit/lockkit/cmd/lockkit-vet ./...
//
// or through go vet:
//
//	go install github.com/lockkit/lockkit/cmd/lockkit-vet@latest
//	go vet -vettool=$(command -v lockkit-vet) ./...
//
// With -fix (on its own, not through go vet) it applies the suggested fixes.
package main

import (
	"github.com/lockkit/lockkit/vet"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(vet.Analyzer) }
