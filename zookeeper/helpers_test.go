package zookeeper_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/internal/zkhook"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
)

// The test ensembles' bounds (testserver: tickTime 100ms).
var bounds = zookeeper.WithSessionTimeouts(200*time.Millisecond, 20*time.Second)

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testOptions are the options of every test client: its log lines go to the
// test log, under the run's key mode and scanned for a raw key in a hashed
// run (internal/testlog).
func testOptions(t testing.TB) []lockkit.Option {
	return []lockkit.Option{lockkit.WithLogger(testlog.Logger(t)), lockkit.WithKeyMode(testlog.KeyMode())}
}

// newClient is a lockkit client on servers, closed with the test.
func newClient(t testing.TB, servers []string, opts ...zookeeper.Option) *lockkit.Client {
	t.Helper()
	return newClientWith(t, servers, opts)
}

// newClientWith is newClient with lockkit options too.
func newClientWith(t testing.TB, servers []string, zkOpts []zookeeper.Option, opts ...lockkit.Option) *lockkit.Client {
	t.Helper()
	c, err := lockkit.New(zookeeper.New(servers, append([]zookeeper.Option{bounds}, zkOpts...)...), append(testOptions(t), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctxT(t, 10*time.Second)) })
	return c
}

func lockOf(c *lockkit.Client, name string, p lockkit.Policy, id string) lockkit.Lock {
	return c.Domain(lockkit.DomainSpec{Name: name, Policy: p}).Key(32).Literal(name + ":").String(id).Lock()
}

// undeclared: the ensemble tests written for a session timeout equal to the
// TTL (TestEnsemble, the paused-server histories) take that setup's risk on
// purpose (internal/zkhook; users cannot); TestFollowerFailsAfterExtend and
// TestQuorumPartition try what it risks, and what WithEnsembleTiming keeps.
var undeclared = zkhook.WithoutEnsembleTiming().(zookeeper.Option)

var retry = lockkit.Retry{Attempts: 1 << 20, Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.5, MaxWait: 60 * time.Second}

// rawConn is a plain go-zookeeper connection, for looking at and changing
// the tree behind the backend's back.
func rawConn(t testing.TB, servers []string) *zk.Conn {
	t.Helper()
	conn := dialRaw(t, servers)
	t.Cleanup(conn.Close)
	return conn
}

// dialRaw is rawConn's session, which the caller closes.
func dialRaw(t testing.TB, servers []string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// nodes lists the lock nodes under the lock path of key (root "/lockkit"),
// syncing first; nil when the path does not exist.
func nodes(t testing.TB, conn *zk.Conn, path string) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := conn.Sync(path)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			kids, _, err := conn.Children(path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err == nil {
				return kids
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitNodes waits until path has want children.
func waitNodes(t testing.TB, conn *zk.Conn, path string, want int, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		kids := nodes(t, conn, path)
		if len(kids) == want {
			return kids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d nodes %v after %v, want %d", path, len(kids), kids, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxy is a TCP proxy in front of one ZooKeeper member that can drop
// everything (a partition that keeps the connections open) or lose the
// reply of the next create: the create is forwarded and the client's
// connection is cut before the reply can come back.
type proxy struct {
	ln     net.Listener
	target string

	blackhole  atomic.Bool
	loseCreate atomic.Bool
	lost       atomic.Int32

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client)
	p.track(server)
	// server → client: bytes as they come, unless blackholed.
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && !p.blackhole.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = client.Close()
	}()
	// client → server: frame by frame (4-byte length, then xid and opcode
	// after the handshake), to spot a create.
	first := true
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			break
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(client, body); err != nil {
			break
		}
		if p.blackhole.Load() {
			continue
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			break
		}
		isCreate := !first && len(body) >= 8 && int32(binary.BigEndian.Uint32(body[4:8])) == 1
		first = false
		if isCreate && p.loseCreate.CompareAndSwap(true, false) {
			// The server has the create; the client never sees its reply.
			_ = client.Close()
			p.lost.Add(1)
			time.Sleep(300 * time.Millisecond) // let the server take it before it sees the close
			break
		}
	}
	_ = client.Close()
	_ = server.Close()
}

// overlap counts holders inside fn at once.
type overlap struct {
	in, max atomic.Int32
}

func (o *overlap) enter() {
	n := o.in.Add(1)
	for {
		m := o.max.Load()
		if n <= m || o.max.CompareAndSwap(m, n) {
			return
		}
	}
}
func (o *overlap) exit() { o.in.Add(-1) }

func startZK(t testing.TB, n int) *testserver.ZooKeeper {
	t.Helper()
	testserver.RequireZooKeeper(t)
	return testserver.StartZooKeeper(t, n)
}
