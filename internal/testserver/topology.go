package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/redis/go-redis/v9"
)

// StartReplica starts a redis-server replicating primary (--replicaof) and returns once
// master_link_status is up, i.e. the initial sync is done. Restart keeps --replicaof.
func StartReplica(t testing.TB, primary *Redis, opts ...RedisOption) *Redis {
	t.Helper()
	opts = append([]RedisOption{WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))}, opts...)
	r := StartRedis(t, opts...)
	waitFor(t, readyTimeout, fmt.Sprintf("replica %s to sync with %s", r.Addr(), primary.Addr()), r.logPath, func() error {
		info, err := respString(r.Addr(), time.Second, "INFO", "replication")
		if err != nil {
			return err
		}
		if s, _ := infoField(info, "master_link_status"); s != "up" {
			return fmt.Errorf("master_link_status:%s", s)
		}
		return nil
	})
	return r
}

// waitFor polls check every 50ms until it passes or d elapses, then fails the test with
// check's last error and the tail of logPath.
func waitFor(t testing.TB, d time.Duration, what, logPath string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: timed out after %v waiting for %s: %v\n--- %s (tail) ---\n%s",
				d, what, err, logPath, logTail(logPath, 0))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Sentinel is a redis-sentinel process monitoring one master. The embedded *Redis gives
// Addr, Port, PID, Pause/Resume/Kill/Stop/Restart; its Client is a plain client that can
// send SENTINEL commands with Do.
type Sentinel struct {
	*Redis
	masterName string
}

// StartSentinel starts a redis-sentinel that monitors primary as masterName with the
// given quorum, down-after-milliseconds 1000 and failover-timeout 5000, configured through
// a generated, writable sentinel.conf in its temp dir (on tmpfs: memDir). It returns once the sentinel sees
// the master up together with the replicas the master had at that moment. Start the
// replicas first: a sentinel discovers later replicas only on its next INFO (every 10s).
func StartSentinel(t testing.TB, primary *Redis, masterName string, quorum int) *Sentinel {
	t.Helper()
	bin := requireRedisBin(t, "redis-sentinel")
	dir := memDir(t)
	conf := filepath.Join(dir, "sentinel.conf")
	s := &Sentinel{
		Redis: &Redis{
			name:    "redis-sentinel",
			bin:     bin,
			lead:    []string{conf},
			dir:     dir,
			logPath: filepath.Join(dir, "sentinel.log"),
		},
		masterName: masterName,
	}
	writeConf := func(int) error {
		c := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s 1
`, masterName, primary.Port(), quorum)
		return os.WriteFile(conf, []byte(c), 0o644)
	}
	replicas := 0
	if info, err := respString(primary.Addr(), time.Second, "INFO", "replication"); err == nil {
		n, _ := infoField(info, "connected_slaves")
		replicas, _ = strconv.Atoi(n)
	}
	s.start(t, false, writeConf)
	waitFor(t, readyTimeout, fmt.Sprintf("sentinel %s to see master %q with %d replica(s)", s.Addr(), masterName, replicas), s.logPath, func() error {
		m, err := s.master()
		if err != nil {
			return err
		}
		if m["flags"] != "master" {
			return fmt.Errorf("master flags %q", m["flags"])
		}
		if n, _ := strconv.Atoi(m["num-slaves"]); n < replicas {
			return fmt.Errorf("sentinel knows %d replica(s)", n)
		}
		return nil
	})
	return s
}

// master returns SENTINEL MASTER's fields.
func (s *Sentinel) master() (map[string]string, error) {
	v, err := respDo(s.Addr(), time.Second, "SENTINEL", "MASTER", s.masterName)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("SENTINEL MASTER: unexpected reply %#v", v)
	}
	m := map[string]string{}
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m, nil
}

// MasterName is the name the sentinel monitors the master under.
func (s *Sentinel) MasterName() string { return s.masterName }

func (s *Sentinel) masterAddr() (string, error) {
	v, err := respDo(s.Addr(), time.Second, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.masterName)
	if err != nil {
		return "", err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: unexpected reply %#v", v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}

// MasterAddr is the master's address as the sentinel reports it (SENTINEL
// GET-MASTER-ADDR-BY-NAME), "127.0.0.1:PORT".
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	a, err := s.masterAddr()
	if err != nil {
		t.Fatalf("testserver: sentinel %s: %v", s.Addr(), err)
	}
	return a
}

// Failover forces a failover with SENTINEL FAILOVER (retried while the sentinel answers
// NOGOODSLAVE or INPROG, up to 15s), then waits up to 20s until the sentinel reports a new
// master address and that server's ROLE is master. It returns the new master's address.
func (s *Sentinel) Failover(t testing.TB) string {
	t.Helper()
	old := s.MasterAddr(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := respDo(s.Addr(), 2*time.Second, "SENTINEL", "FAILOVER", s.masterName)
		if err == nil && v == "OK" {
			break
		}
		if e, ok := v.(respError); err == nil && ok && (strings.HasPrefix(string(e), "NOGOODSLAVE") || strings.HasPrefix(string(e), "INPROG")) && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		t.Fatalf("testserver: SENTINEL FAILOVER %s on %s: reply %#v, err %v\n--- %s (tail) ---\n%s",
			s.masterName, s.Addr(), v, err, s.logPath, logTail(s.logPath, 0))
	}
	var addr string
	waitFor(t, 20*time.Second, fmt.Sprintf("sentinel %s to promote a replica of %s", s.Addr(), old), s.logPath, func() error {
		a, err := s.masterAddr()
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("master is still %s", a)
		}
		v, err := respDo(a, time.Second, "ROLE")
		if err != nil {
			return err
		}
		if arr, ok := v.([]any); !ok || len(arr) == 0 || arr[0] != "master" {
			return fmt.Errorf("%s: ROLE %#v", a, v)
		}
		addr = a
		return nil
	})
	return addr
}

// SentinelClient returns a new go-redis SentinelClient for this sentinel, closed in t.Cleanup.
func (s *Sentinel) SentinelClient(t testing.TB, opts ...func(*redis.Options)) *redis.SentinelClient {
	t.Helper()
	o := testOptions(s.Addr())
	for _, f := range opts {
		f(o)
	}
	c := redis.NewSentinelClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FailoverClient returns a new go-redis client that finds the master through this
// sentinel (redis.NewFailoverClient), with the same test defaults as Redis.Client, closed
// in t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{
		MasterName:            s.masterName,
		SentinelAddrs:         []string{s.Addr()},
		ContextTimeoutEnabled: true,
	}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testOptions are the README's client options (README.md, "Setting up a
// client"): tests run the configuration users run, go-redis's default
// retries included (issue 35).
func testOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
}

// Cluster is a Redis Cluster of masters only, each a *Redis on 127.0.0.1.
type Cluster struct {
	nodes    []*Redis
	replicas []*Redis // AddReplicas's, in master order
	opts     []RedisOption
}

// KeyOnMaster is a key and the Cluster master that serves it.
type KeyOnMaster struct {
	Key    string
	Master *redis.Client
}

// KeysPerMaster picks up to n keys for each master of rdb's Cluster from
// keys (every 97th, so that they spread over the slot ranges), each with its
// master. It fails the test unless the picks cover masters masters.
func KeysPerMaster(t testing.TB, ctx context.Context, rdb *redis.ClusterClient, keys []string, n, masters int) []KeyOnMaster {
	t.Helper()
	var picked []KeyOnMaster
	perNode := map[string]int{}
	for i := 0; i < len(keys); i += 97 {
		m, err := rdb.MasterForKey(ctx, keys[i])
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; perNode[addr] < n {
			perNode[addr]++
			picked = append(picked, KeyOnMaster{keys[i], m})
		}
	}
	if len(perNode) != masters {
		t.Fatalf("keys on %d masters, want %d", len(perNode), masters)
	}
	return picked
}

// KeyPerSlot returns one lock key for each of the 16384 Cluster slots, in
// slot order: "lock:slot{N}" for the smallest N whose tag hashes there.
func KeyPerSlot() []string {
	keys := make([]string, 16384)
	for i, left := 0, len(keys); left > 0; i++ {
		tag := strconv.Itoa(i)
		if slot := policy.ClusterSlot(tag); keys[slot] == "" {
			keys[slot] = policy.Key("lock:slot", tag)
			left--
		}
	}
	return keys
}

// clusterNodeTimeout is the cluster-node-timeout (ms) of StartCluster's nodes: how long
// a node may go unanswered before its peers flag it PFAIL, and a majority of masters
// then FAIL, which takes the whole cluster to cluster_state:fail (CLUSTERDOWN) until
// a replica takes over. No test relies on the cluster's own failure detection (a
// killed node is restarted at once, a paused one resumed), so this is Redis's
// default: 2000 let a node starved of CPU on a loaded CI machine be failed, and the
// cluster go down, in the middle of a test (TestClusterReshardReplicas, stop 57).
const clusterNodeTimeout = "15000"

// StartCluster starts masters (at least 3) redis-server nodes with --cluster-enabled yes,
// a nodes.conf in each node's temp dir and cluster-node-timeout clusterNodeTimeout, joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and returns once
// every node reports cluster_state:ok and knows all the others. Each node's port+10000
// (its cluster bus port) was free too. opts apply to every node.
func StartCluster(t testing.TB, masters int, opts ...RedisOption) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("testserver: StartCluster: redis-cli --cluster create needs at least 3 masters, got %d", masters)
	}
	cli := requireRedisBin(t, "redis-cli")
	nodeOpts := append([]RedisOption{
		func(c *redisConfig) { c.bus = true },
		WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", clusterNodeTimeout),
	}, opts...)
	c := &Cluster{opts: nodeOpts}
	for range masters {
		c.nodes = append(c.nodes, StartRedis(t, nodeOpts...))
	}
	// The logs stay in the test's temp dir, removed only after every cleanup
	// registered after it, this one included (replicas added later are read too).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testserver: cluster nodes' state changes:\n%s", c.stateChanges())
		}
	})
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.WaitOK(t)
	return c
}

// WaitOK waits (up to 10s for each node) until every node reports cluster_state:ok and
// knows all the others, e.g. after restarting a node.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	for _, n := range c.nodes {
		waitFor(t, readyTimeout, "cluster_state:ok on "+n.Addr(), n.logPath, func() error {
			info, err := respString(n.Addr(), time.Second, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if s, _ := infoField(info, "cluster_state"); s != "ok" {
				return fmt.Errorf("cluster_state:%s", s)
			}
			if k, _ := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(len(c.nodes)+len(c.replicas)) {
				return fmt.Errorf("cluster_known_nodes:%s, want %d", k, len(c.nodes)+len(c.replicas))
			}
			return nil
		})
	}
}

// stateChanges are the lines of every node's log (masters and replicas) on
// cluster state, failure detection and failover, the last 20 of each: what a
// failed test needs to tell a CLUSTERDOWN of its own making from one the
// cluster decided.
func (c *Cluster) stateChanges() string {
	var b strings.Builder
	for _, n := range append(slices.Clone(c.nodes), c.replicas...) {
		fmt.Fprintf(&b, "--- %s (%s)\n", n.Addr(), n.logPath)
		data, err := os.ReadFile(n.logPath)
		if err != nil {
			fmt.Fprintf(&b, "(no log: %v)\n", err)
			continue
		}
		var lines []string
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "Cluster state changed") || strings.Contains(line, "FAIL") ||
				strings.Contains(line, "ailover") || strings.Contains(line, "configEpoch") {
				lines = append(lines, line)
			}
		}
		if len(lines) == 0 {
			b.WriteString("(none)\n")
		}
		for _, line := range lines[max(0, len(lines)-20):] {
			b.WriteString(line)
		}
	}
	return b.String()
}

// AddReplicas adds one replica to each master (`redis-cli --cluster add-node
// --cluster-slave --cluster-master-id`, which waits for the node to join), and
// returns once every replica reports master_link_status:up and every node
// knows all the others. Nodes stays the masters; Replicas lists the new nodes.
func (c *Cluster) AddReplicas(t testing.TB) {
	t.Helper()
	cli := requireRedisBin(t, "redis-cli")
	for _, m := range c.nodes {
		id, err := respString(m.Addr(), time.Second, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("testserver: CLUSTER MYID on %s: %v", m.Addr(), err)
		}
		r := StartRedis(t, c.opts...)
		args := []string{"--cluster", "add-node", r.Addr(), m.Addr(), "--cluster-slave", "--cluster-master-id", strings.TrimSpace(id)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("testserver: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		c.replicas = append(c.replicas, r)
	}
	for _, r := range c.replicas {
		waitFor(t, readyTimeout, "replica "+r.Addr()+" to sync", r.logPath, func() error {
			info, err := respString(r.Addr(), time.Second, "INFO", "replication")
			if err != nil {
				return err
			}
			if s, _ := infoField(info, "master_link_status"); s != "up" {
				return fmt.Errorf("master_link_status:%s", s)
			}
			return nil
		})
	}
	c.WaitOK(t)
}

// Replicas are the nodes AddReplicas added, the replica of Nodes()[i] at i.
func (c *Cluster) Replicas() []*Redis { return c.replicas }

// Nodes are the cluster's nodes, to Pause, Kill, Restart... one of them.
func (c *Cluster) Nodes() []*Redis { return c.nodes }

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.Addr()
	}
	return a
}

// Client returns a new go-redis ClusterClient seeded with every node, with the same test
// defaults as Redis.Client, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// clusterNode is one line of CLUSTER NODES: a node's id, address, role and
// the slots it serves (a master's).
type clusterNode struct {
	id, addr, masterID string
	master             bool
	slots              [][2]int
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterNodes reads CLUSTER NODES on addr (migrating and importing markers
// are skipped: they serve no slot yet).
func clusterNodes(addr string) ([]clusterNode, error) {
	out, err := respString(addr, time.Second, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: short line %q", addr, line)
		}
		n := clusterNode{id: f[0], addr: strings.Split(f[1], "@")[0], masterID: f[3], master: slices.Contains(strings.Split(f[2], ","), "master")}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, _ := strings.Cut(s, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("CLUSTER NODES on %s: slot %q", addr, s)
			}
			b := a
			if hi != "" {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("CLUSTER NODES on %s: slot %q", addr, s)
				}
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// all are the masters and the replicas.
func (c *Cluster) all() []*Redis { return append(append([]*Redis{}, c.nodes...), c.replicas...) }

// slotOwner is the slot's owner in addr's view of the cluster, and every
// node of that view.
func slotOwner(addr string, slot int) (clusterNode, []clusterNode, error) {
	nodes, err := clusterNodes(addr)
	if err != nil {
		return clusterNode{}, nil, err
	}
	for _, n := range nodes {
		if n.master && n.serves(slot) {
			return n, nodes, nil
		}
	}
	return clusterNode{}, nodes, fmt.Errorf("no master serves slot %d in %s's view", slot, addr)
}

// waitOwner waits until every node of the cluster names the node with id
// as slot's owner, and the cluster is ok.
func (c *Cluster) waitOwner(t testing.TB, slot int, id string) {
	t.Helper()
	for _, n := range c.all() {
		waitFor(t, readyTimeout, fmt.Sprintf("slot %d served by %s in %s's view", slot, id, n.Addr()), n.logPath, func() error {
			o, _, err := slotOwner(n.Addr(), slot)
			if err != nil {
				return err
			}
			if o.id != id {
				return fmt.Errorf("slot %d served by %s (%s)", slot, o.id, o.addr)
			}
			return nil
		})
	}
	c.WaitOK(t)
}

func (c *Cluster) keySlot(t testing.TB, key string) int {
	t.Helper()
	v, err := respDo(c.nodes[0].Addr(), time.Second, "CLUSTER", "KEYSLOT", key)
	s, ok := v.(int64)
	if err != nil || !ok {
		t.Fatalf("testserver: CLUSTER KEYSLOT %q: %#v, %v", key, v, err)
	}
	return int(s)
}

func mustOK(t testing.TB, addr string, args ...string) {
	t.Helper()
	v, err := respDo(addr, 5*time.Second, args...)
	if err != nil || v != "OK" {
		t.Fatalf("testserver: %s on %s: %#v, %v", strings.Join(args, " "), addr, v, err)
	}
}

// MoveSlot migrates key's slot, with every key in it, from its master to
// another master (SETSLOT IMPORTING and MIGRATING, MIGRATE, then SETSLOT
// NODE on every master), as redis-cli --cluster reshard does, and waits
// until every node sees the new owner. It returns the new owner's address.
func (c *Cluster) MoveSlot(t testing.TB, key string) string {
	t.Helper()
	slot := c.keySlot(t, key)
	src, nodes, err := slotOwner(c.nodes[0].Addr(), slot)
	if err != nil {
		t.Fatalf("testserver: MoveSlot: %v", err)
	}
	var dst clusterNode
	for _, n := range nodes {
		if n.master && n.id != src.id && len(n.slots) > 0 {
			dst = n
			break
		}
	}
	if dst.id == "" {
		t.Fatalf("testserver: MoveSlot: no other master than %s", src.addr)
	}
	s := strconv.Itoa(slot)
	mustOK(t, dst.addr, "CLUSTER", "SETSLOT", s, "IMPORTING", src.id)
	mustOK(t, src.addr, "CLUSTER", "SETSLOT", s, "MIGRATING", dst.id)
	for {
		v, err := respDo(src.addr, 5*time.Second, "CLUSTER", "GETKEYSINSLOT", s, "100")
		keys, ok := v.([]any)
		if err != nil || !ok {
			t.Fatalf("testserver: CLUSTER GETKEYSINSLOT %s on %s: %#v, %v", s, src.addr, v, err)
		}
		if len(keys) == 0 {
			break
		}
		host, port, _ := strings.Cut(dst.addr, ":")
		args := []string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}
		for _, k := range keys {
			args = append(args, k.(string))
		}
		mustOK(t, src.addr, args...)
	}
	mustOK(t, dst.addr, "CLUSTER", "SETSLOT", s, "NODE", dst.id)
	mustOK(t, src.addr, "CLUSTER", "SETSLOT", s, "NODE", dst.id)
	for _, n := range nodes {
		// Masters serving slots: a replica just added may still be
		// gossiped as an empty master.
		if n.master && len(n.slots) > 0 && n.id != src.id && n.id != dst.id {
			mustOK(t, n.addr, "CLUSTER", "SETSLOT", s, "NODE", dst.id)
		}
	}
	c.waitOwner(t, slot, dst.id)
	return dst.addr
}

// FailoverKey promotes the replica of key's master with CLUSTER FAILOVER
// (the coordinated kind: the replica first catches up with its master),
// and waits until every node sees it serve the slot. Needs AddReplicas.
// Nodes and Replicas keep their order; the roles of the two swap.
func (c *Cluster) FailoverKey(t testing.TB, key string) string {
	t.Helper()
	slot := c.keySlot(t, key)
	m, nodes, err := slotOwner(c.nodes[0].Addr(), slot)
	if err != nil {
		t.Fatalf("testserver: FailoverKey: %v", err)
	}
	var r clusterNode
	for _, n := range nodes {
		if !n.master && n.masterID == m.id {
			r = n
		}
	}
	if r.id == "" {
		t.Fatalf("testserver: FailoverKey: master %s of slot %d has no replica (AddReplicas)", m.addr, slot)
	}
	mustOK(t, r.addr, "CLUSTER", "FAILOVER")
	c.waitOwner(t, slot, r.id)
	return r.addr
}

// memDir is a temp dir on tmpfs (/dev/shm) when the machine has one, else
// t.TempDir(). A sentinel fsyncs its config file on its own event loop at
// every change, and a loop held up for 2s puts it in TILT mode, where it
// does nothing for 30s: on this machine's disk the fsync of a failover's
// config took 2.3s and 6.2s (a rehearsal of round 23, beside a compile), and
// TestSentinelFailover's failover never came. An fsync on tmpfs returns at
// once.
func memDir(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "lockkit-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}
