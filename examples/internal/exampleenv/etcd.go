package exampleenv

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/lockkit"
)

// EtcdEndpoints is ETCD_ENDPOINTS ("host:port,host:port,..."), split at its
// commas; nil when it is unset: the example then takes its locks in etcd.
func EtcdEndpoints() []string {
	v := strings.TrimSpace(os.Getenv("ETCD_ENDPOINTS"))
	if v == "" {
		return nil
	}
	var eps []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// etcdClients are the etcd clients of the replicas on etcd, by lockkit
// client: CrashEtcd closes one.
var etcdClients sync.Map // *lockkit.Client → *clientv3.Client

// NewEtcdClient returns a new replica on etcd: a lockkit client over an etcd
// client of its own, on every endpoint. Its spans go to TracerProvider and
// its log lines to Out. Close closes both.
func (e *Env) NewEtcdClient(endpoints []string, opts ...lockkit.Option) (*lockkit.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("exampleenv: etcd client on %v (ETCD_ENDPOINTS): %w", endpoints, err)
	}
	all := append([]lockkit.Option{lockkit.WithLogger(e.log), lockkit.WithTracerProvider(e.TracerProvider)}, opts...)
	lk, err := lockkit.New(etcd.New(cli), all...)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	etcdClients.Store(lk, cli)
	e.mu.Lock()
	e.replicas = append(e.replicas, &replica{lk: lk, closeAfter: cli.Close})
	e.mu.Unlock()
	return lk, nil
}

// CrashEtcd makes c's replica die as a killed process does: its etcd client
// is closed, so its keep-alives never reach etcd again and it never releases
// what it holds, which stays locked until its lease expires.
func (e *Env) CrashEtcd(c *lockkit.Client) error {
	v, ok := etcdClients.Load(c)
	if !ok {
		return errors.New("exampleenv: CrashEtcd: the client was not made by NewEtcdClient")
	}
	e.mu.Lock()
	for _, r := range e.replicas {
		if r.lk == c {
			r.crashed = true
		}
	}
	e.mu.Unlock()
	return v.(*clientv3.Client).Close()
}
