// Command etcd is the etcd server that lockkit's etcd tests run
// (internal/testserver), built from etcd's own Go module by .ci/build-etcd.sh.
// This is a separate module so the main module never depends on the etcd server.
// To upgrade: `go get go.etcd.io/etcd/server/v3@vX` in this directory, then
// `go mod tidy`.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
