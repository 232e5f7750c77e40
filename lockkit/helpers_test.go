package lockkit

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// fakeUniversal is a go-redis client pointed at a closed port: for tests that
// need a client value but never send a command.
func fakeUniversal(t *testing.T) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newClient is a lockkit client over its own go-redis client, as a separate
// replica of a service would have. It is closed when the test ends.
func newClient(t *testing.T, r *testserver.Redis, opts ...Option) *Client {
	t.Helper()
	return newClientOver(t, r.Client(t), opts...)
}

// newClientOver is newClient over a given go-redis client (Sentinel,
// Cluster, a proxied one).
func newClientOver(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, append([]Option{WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// testDomain binds a domain named after the test, so tests never share keys.
func testDomain(t *testing.T, c *Client, p Policy) *Domain {
	t.Helper()
	d := c.Domain(DomainSpec{Name: "test", Prefix: "lock:" + t.Name() + ":", Policy: p})
	if d.err != nil {
		t.Fatal(d.err)
	}
	return d
}

func lockOn(d *Domain, id string) Lock {
	return d.Key(len(id) + 3).Literal("id:").String(id).Lock()
}

// testLogger sends the client's log lines to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
