package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// TestKeeperStreamReconnecting: a keep-alive that must open the keep-alives'
// stream again while the client's connection is reconnecting to a member
// that accepts TCP but answers nothing (SIGSTOP) ends at its ctx, and so
// does the backend's Close (guarantee 7). The client, as a user may
// configure it, has gRPC keep-alives: they declare the stopped member's
// connection dead, which breaks the stream, and gRPC connects again; a new
// stream waits while that connection is CONNECTING (the handshake gets no
// answer), up to gRPC's minimum connect timeout, 20s. The keeper opened its
// stream in line, under its lock, with a ctx only Close cancels, so the
// keep-alive and Close waited for those 20s.
func TestKeeperStreamReconnecting(t *testing.T) {
	t.Parallel() // idle: it waits out gRPC's keep-alive timers
	c := testserver.StartEtcd(t, 1)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            c.Endpoints(),
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second, // gRPC's minimum
		DialKeepAliveTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	spec := etcd.New(cli)
	be, err := spec.Open(driver.Config{CommandTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })

	const lockTTL = 10 * time.Second
	ctx := ctxT(t, 10*time.Second)
	if _, err := be.Acquire(ctx, &driver.Request{Key: "ka", Token: "A", TTL: lockTTL}); err != nil {
		t.Fatal(err)
	}
	// The first extend opens the keep-alives' stream.
	if held, err := be.Extend(ctx, "ka", "A", lockTTL); err != nil || !held {
		t.Fatalf("extend: held %v, %v", held, err)
	}

	m := newStoppable(t, c.Members[0])
	m.pause()
	pausedAt := time.Now()
	wake := time.AfterFunc(40*time.Second, m.resume)
	defer wake.Stop()

	// gRPC's keep-alive declares the connection dead (10s + 2s), and the
	// client connects again: CONNECTING, to a member that accepts the TCP
	// connection and never answers its handshake.
	conn := cli.ActiveConnection()
	for st := conn.GetState(); st != connectivity.Connecting; st = conn.GetState() {
		wctx, cancel := context.WithTimeout(context.Background(), 25*time.Second-time.Since(pausedAt))
		changed := conn.WaitForStateChange(wctx, st)
		cancel()
		if !changed {
			t.Fatalf("the connection stayed %v %v after the member was stopped", st, time.Since(pausedAt).Round(time.Millisecond))
		}
	}
	t.Logf("connection CONNECTING %v after the pause", time.Since(pausedAt).Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond) // the broken stream's receiver ends

	// An extend bounded by the command timeout (500ms), through the keeper,
	// which has no stream and must open one; and, 1s later, while the
	// connection is still CONNECTING, the backend's Close.
	type result struct {
		took time.Duration
		held bool
		err  error
	}
	extended := make(chan result, 1)
	go func() {
		ectx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		held, err := be.Extend(ectx, "ka", "A", lockTTL)
		extended <- result{time.Since(start), held, err}
	}()
	time.Sleep(time.Second)
	st := conn.GetState()
	start := time.Now()
	_ = be.Close()
	closeTook := time.Since(start)
	r := <-extended
	stillPaused := m.stopped()
	m.resume()
	t.Logf("extend while reconnecting: returned %v after it was called (ctx 500ms): held %v, %v", r.took.Round(time.Millisecond), r.held, r.err)
	t.Logf("backend Close, called with the connection %v: returned %v after it was called (member still stopped: %v)", st, closeTook.Round(time.Millisecond), stillPaused)
	if r.took > 2*time.Second {
		t.Errorf("an extend with a ctx of 500ms returned %v after it was called", r.took.Round(time.Millisecond))
	}
	if closeTook > 2*time.Second {
		t.Errorf("the backend's Close returned %v after it was called", closeTook.Round(time.Millisecond))
	}
}
