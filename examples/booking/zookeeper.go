package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
)

// zkServersEnv names the ZooKeeper ensemble ("zk1:2181,zk2:2181,zk3:2181",
// a chroot may follow): with it set, the replicas take their locks there and
// the bookings stay in Redis (REDIS_URL, or the embedded one). The example
// declares no ensemble timing, so it takes one server (a standalone one);
// an application on an ensemble adds zookeeper.WithEnsembleTiming with its
// zoo.cfg's tickTime and syncLimit, and zookeeper.New refuses several
// servers without it.
const zkServersEnv = "ZOOKEEPER_SERVERS"

// zkReplicas are the lockkit clients on ZooKeeper, closed at the end of the
// run (exampleenv closes only the clients it made).
var zkReplicas struct {
	sync.Mutex
	cs []*lockkit.Client
}

// newZooKeeperReplica is a replica's lockkit client on the ensemble. Its
// logger is silent: the example's other domains (cron: ttl 1m) lie outside
// ZooKeeper's default session timeouts (4–40s) and are refused, which the
// client would log; the race uses the table domain (10s) only.
func newZooKeeperReplica(env *exampleenv.Env) (*lockkit.Client, error) {
	c, err := lockkit.New(zookeeper.New(strings.Split(os.Getenv(zkServersEnv), ",")),
		lockkit.WithLogger(discardLogger), lockkit.WithTracerProvider(env.TracerProvider))
	if err != nil {
		return nil, err
	}
	zkReplicas.Lock()
	zkReplicas.cs = append(zkReplicas.cs, c)
	zkReplicas.Unlock()
	return c, nil
}

// runZooKeeper tells the race on ZooKeeper: each replica's lock is an
// ephemeral sequential node of its session, and its fence the node's Czxid.
func runZooKeeper(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	fmt.Fprintf(w, "lockkit: locks on the ZooKeeper ensemble %s; bookings in Redis\n", os.Getenv(zkServersEnv))
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		zkReplicas.Lock()
		defer zkReplicas.Unlock()
		for _, c := range zkReplicas.cs {
			_ = c.Close(cctx)
		}
		zkReplicas.cs = nil
	}()
	db := &database{rdb: env.NewRedis()}
	if err := db.reset(ctx, "12", "13"); err != nil {
		return err
	}
	return race(ctx, w, env, db, env.Tracer("github.com/lockkit/lockkit/examples/booking"))
}
