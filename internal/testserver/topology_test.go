package testserver

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// eventually retries f every 50ms for up to d.
func eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestReplicaReceivesWrite(t *testing.T) {
	t.Parallel()
	p := StartRedis(t)
	rep := StartReplica(t, p)
	ctx := ctxT(t, 10*time.Second)
	if got := rep.Info(t, "replication"); got["role"] != "slave" || got["master_port"] != fmt.Sprint(p.Port()) {
		t.Fatalf("replica INFO replication: role %q master_port %q", got["role"], got["master_port"])
	}
	if err := p.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rc := rep.Client(t)
	eventually(t, 5*time.Second, "GET k on the replica", func() error {
		got, err := rc.Get(ctx, "k").Result()
		if err == nil && got != "v" {
			err = fmt.Errorf("got %q", got)
		}
		return err
	})
	if err := rc.Set(ctx, "x", "y", 0).Err(); err == nil {
		t.Error("write to a read-only replica succeeded")
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	p := StartRedis(t)
	rep := StartReplica(t, p)
	s := StartSentinel(t, p, "mymaster", 1)
	ctx := ctxT(t, 45*time.Second)

	if got := s.MasterAddr(t); got != p.Addr() {
		t.Fatalf("MasterAddr = %s, want %s", got, p.Addr())
	}
	got, err := s.SentinelClient(t).GetMasterAddrByName(ctx, "mymaster").Result()
	if err != nil || len(got) != 2 || got[0] != "127.0.0.1" || got[1] != fmt.Sprint(p.Port()) {
		t.Fatalf("SENTINEL get-master-addr-by-name = %v, %v; want [127.0.0.1 %d]", got, err, p.Port())
	}
	fc := s.FailoverClient(t)
	if err := fc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}

	if na := s.Failover(t); na != rep.Addr() {
		t.Fatalf("Failover promoted %s, want the replica %s", na, rep.Addr())
	}
	if role := rep.Info(t, "replication")["role"]; role != "master" {
		t.Fatalf("replica's role after failover = %q", role)
	}
	// The failover client follows the switch (bounded). Until the sentinel demotes it, the
	// old master still takes writes, so check that a write reaches the new master.
	rc := rep.Client(t)
	n := 0
	eventually(t, 15*time.Second, "a write through the failover client reaches the new master", func() error {
		n++
		want := fmt.Sprint("after-", n)
		if err := fc.Set(ctx, "k", want, 0).Err(); err != nil {
			return err
		}
		if v, err := rc.Get(ctx, "k").Result(); err != nil || v != want {
			return fmt.Errorf("GET k on the new master = %q, %v; want %q", v, err, want)
		}
		return nil
	})
}

func TestCluster(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := StartCluster(t, 3)
		ctx := ctxT(t, 20*time.Second)
		if len(c.Nodes()) != 3 || len(c.Addrs()) != 3 {
			t.Fatalf("%d nodes, %d addrs", len(c.Nodes()), len(c.Addrs()))
		}
		for _, n := range c.Nodes() {
			pids = append(pids, n.PID())
			if n.Port() > maxPort {
				t.Errorf("node port %d > %d", n.Port(), maxPort)
			}
			info, err := n.Client(t).ClusterInfo(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if s, _ := infoField(info, "cluster_state"); s != "ok" {
				t.Errorf("%s: cluster_state:%s", n.Addr(), s)
			}
		}
		cc := c.Client(t)
		// Keys until each of the 3 masters owns at least one of them.
		owners := map[string][]string{}
		for i := 0; len(owners) < 3 && i < 1000; i++ {
			key := fmt.Sprintf("key-%d", i)
			m, err := cc.MasterForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			owners[m.Options().Addr] = append(owners[m.Options().Addr], key)
		}
		if len(owners) != 3 {
			t.Fatalf("keys map to %d masters, want 3", len(owners))
		}
		slots := map[int64]bool{}
		for addr, keys := range owners {
			k := keys[0]
			if err := cc.Set(ctx, k, addr, 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
			if v, err := cc.Get(ctx, k).Result(); err != nil || v != addr {
				t.Fatalf("GET %s = %q, %v", k, v, err)
			}
			slot, err := cc.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
			// The key really lives on that node: a plain client there sees it.
			for _, n := range c.Nodes() {
				if n.Addr() == addr {
					if v, err := n.Client(t).Get(ctx, k).Result(); err != nil || v != addr {
						t.Fatalf("GET %s on its node %s = %q, %v", k, addr, v, err)
					}
				}
			}
		}
		if len(slots) != 3 {
			t.Fatalf("keys are in %d slots, want 3", len(slots))
		}
		// Another node answers MOVED.
		for _, n := range c.Nodes() {
			if _, mine := owners[n.Addr()]; !mine {
				continue
			}
			for addr, keys := range owners {
				if addr != n.Addr() {
					err := n.Client(t).Get(ctx, keys[0]).Err()
					var re redis.Error
					if !errors.As(err, &re) {
						t.Fatalf("GET %s on %s: err = %v, want MOVED", keys[0], n.Addr(), err)
					}
					break
				}
			}
			break
		}

		// A node killed and restarted on the same ports rejoins (nodes.conf is kept); its
		// keys are gone, the others' are not.
		n0 := c.Nodes()[0]
		n0.Kill(t)
		n0.Restart(t)
		pids = append(pids, n0.PID())
		c.WaitOK(t)
		cc2 := c.Client(t)
		for addr, keys := range owners {
			err := cc2.Get(ctx, keys[0]).Err()
			if addr == n0.Addr() && !errors.Is(err, redis.Nil) {
				t.Errorf("GET %s (on the restarted node) err = %v, want redis.Nil", keys[0], err)
			}
			if addr != n0.Addr() && err != nil {
				t.Errorf("GET %s (on %s) err = %v", keys[0], addr, err)
			}
		}
	})
	for _, pid := range pids {
		assertGone(t, "cluster node", pid)
	}
}

func TestStartClusterNeedsThreeMasters(t *testing.T) {
	t.Parallel()
	ft := runFake(t, func(tb testing.TB) { StartCluster(tb, 2) })
	if ft.fatal == "" {
		t.Fatal("StartCluster(t, 2) did not fail")
	}
}
