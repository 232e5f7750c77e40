package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdSingle: a 1-member cluster serves a put and get, keeps the value across a
// Restart (same data dir), and names itself leader.
func TestEtcdSingle(t *testing.T) {
	c := StartEtcd(t, 1)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := c.Leader(t, 5*time.Second); got != 0 {
		t.Fatalf("leader = %d, want 0", got)
	}
	pid := c.Members[0].PID()
	c.Members[0].Restart(t)
	if c.Members[0].PID() == pid {
		t.Fatalf("Restart kept pid %d", pid)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after restart: %v %v", resp, err)
	}
}

// TestEtcdThreeFaults: a 3-member cluster elects a new leader after its leader is
// SIGKILLed and still commits; a paused member answers nothing; with two members
// stopped a put fails within its deadline; after the members come back (and after a
// whole-cluster restart) the data is there.
func TestEtcdThreeFaults(t *testing.T) {
	c := StartEtcd(t, 3)
	cli := c.Client(t)
	put := func(key string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := cli.Put(ctx, key, "v")
		return err
	}
	if err := put("a", 10*time.Second); err != nil {
		t.Fatalf("put: %v", err)
	}

	old := c.Leader(t, 10*time.Second)
	start := time.Now()
	c.Members[old].Kill(t)
	nl := c.Leader(t, 20*time.Second)
	if nl == old {
		t.Fatalf("leader still %d after kill", old)
	}
	if err := put("b", 10*time.Second); err != nil {
		t.Fatalf("put after leader kill: %v", err)
	}
	t.Logf("leader %d killed; new leader %d, put committed after %v", old, nl, time.Since(start))
	c.Members[old].Start(t)

	// A paused member answers nothing: a status call on it alone times out.
	p := (nl + 1) % 3
	c.Members[p].Pause(t)
	if _, err := etcdStatus(c.Members[p].Endpoint(), 500*time.Millisecond); err == nil {
		t.Fatalf("paused member %d answered", p)
	}
	c.Members[p].Resume(t)

	// Quorum lost: two of three stopped; a put does not commit and fails within its
	// deadline plus a margin.
	c.Members[(nl+1)%3].Stop(t)
	c.Members[(nl+2)%3].Stop(t)
	start = time.Now()
	err := put("c", 2*time.Second)
	if err == nil {
		t.Fatal("put committed without quorum")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("put without quorum took %v", d)
	}
	t.Logf("put without quorum: %v after %v", err, time.Since(start))
	c.Members[(nl+1)%3].Start(t)
	c.Members[(nl+2)%3].Start(t)

	c.RestartAll(t)
	c.Leader(t, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("get after RestartAll: %v", err)
	}
	// "c" timed out without quorum but may commit once quorum is back (etcd keeps the
	// proposal): an unanswered put is indeterminate. a and b must be there.
	got := map[string]bool{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = true
	}
	if !got["a"] || !got["b"] {
		t.Fatalf("after RestartAll: keys %v, want a and b", got)
	}
	t.Logf("after RestartAll: keys %v (c, put without quorum, committed later: %v)", got, got["c"])
}

func zkConnect(t *testing.T, z *ZooKeeper) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(z.Servers(), 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk connect: %v", err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// TestZooKeeperSingle: a standalone server serves a create and names itself leader;
// the node is there after a Restart.
func TestZooKeeperSingle(t *testing.T) {
	z := StartZooKeeper(t, 1)
	if got := z.Leader(t, 5*time.Second); got != 0 {
		t.Fatalf("leader = %d", got)
	}
	conn := zkConnect(t, z)
	if _, err := conn.Create("/a", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	z.Members[0].Restart(t)
	// A new session, as TestZooKeeperThreeFaults reads after RestartAll:
	// Restart returns once the member serves, but the old session's
	// reconnect may have begun while the member was going down, and
	// go-zookeeper waits up to 10 × its receive timeout (about 27s here)
	// for a handshake answer, which under load outlasted this test's wait.
	conn = zkConnect(t, z)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, _, err := conn.Exists("/a")
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: exists=%v err=%v", ok, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestZooKeeperThreeFaults: a 3-member ensemble elects a new leader after its leader is
// SIGKILLed; a paused member answers nothing; without quorum the lone member stops
// serving (srvr says so, so nothing can commit); after a whole-ensemble restart the data is there.
func TestZooKeeperThreeFaults(t *testing.T) {
	z := StartZooKeeper(t, 3)
	conn := zkConnect(t, z)
	if _, err := conn.Create("/a", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}
	old := z.Leader(t, 10*time.Second)
	start := time.Now()
	z.Members[old].Kill(t)
	nl := z.Leader(t, 30*time.Second)
	if nl == old {
		t.Fatalf("leader still %d", old)
	}
	t.Logf("leader %d killed; new leader %d after %v", old, nl, time.Since(start))
	z.Members[old].Start(t)

	p := (nl + 1) % 3
	z.Members[p].Pause(t)
	if _, err := z.Members[p].FourLetter("ruok", 500*time.Millisecond); err == nil {
		t.Fatalf("paused member %d answered", p)
	}
	z.Members[p].Resume(t)

	z.Members[(nl+1)%3].Stop(t)
	z.Members[(nl+2)%3].Stop(t)
	// The remaining member stops serving once it sees it has no quorum.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := z.Members[nl].Mode(); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lone member still serving 20s after quorum was lost")
		}
		time.Sleep(50 * time.Millisecond)
	}
	z.RestartAll(t)
	z.Leader(t, 30*time.Second)
	conn2 := zkConnect(t, z)
	kids, _, err := conn2.Children("/")
	if err != nil {
		t.Fatalf("children: %v", err)
	}
	t.Logf("children after RestartAll: %v", kids)
	found := false
	for _, k := range kids {
		found = found || k == "a"
	}
	if !found {
		t.Fatalf("/a lost across RestartAll: %v", kids)
	}
}
