// Package lockkittest gives tests an embedded lock store: an in-process Redis
// (miniredis) on 127.0.0.1, set up so that lock TTLs expire on the real
// clock, and lockkit clients on it that are closed when the test ends. Code
// that takes generated locks (locks.New(client)) can then be tested without a
// Redis server:
//
//	func TestBook(t *testing.T) {
//		l := locks.New(lockkittest.NewClient(t))
//		err := l.Table("12").Do(t.Context(), func(ctx context.Context, lease *lockkit.Lease) error {
//			return book(ctx, "12", lease.Fence())
//		})
//		...
//	}
//
// The embedded store runs lockkit's own scripts, so owner checks, expiry,
// renewal, fencing and FIFO waiting behave as on Redis; what it cannot show is
// what a real deployment adds (network faults, failover, persistence). For
// those, test against a real redis-server: docs/testing.md shows both ways.
package lockkittest

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

// Server is an embedded lock store, stopped when the test that made it ends.
type Server struct {
	m *miniredis.Miniredis
	t testing.TB
}

// NewServer starts an embedded lock store on a free loopback port. It is
// stopped, and its clients closed, when t ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	m := miniredis.NewMiniRedis()
	// miniredis keeps every TTL until a test calls FastForward; lockkit's
	// leases need keys to expire on their own, as Redis's do.
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatalf("lockkittest: starting the embedded store: %v", err)
	}
	t.Cleanup(m.Close)
	return &Server{m: m, t: t}
}

// Addr is the store's address (host:port), for a go-redis client of the
// test's own.
func (s *Server) Addr() string { return s.m.Addr() }

// NewClient returns a lockkit client on the store, as a replica of the
// service under test would have one: call it once per replica to test
// several replicas racing. The client and its go-redis client are closed
// when the test ends; Close them earlier to test shutdown.
func (s *Server) NewClient(opts ...lockkit.Option) *lockkit.Client {
	s.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.m.Addr(), ContextTimeoutEnabled: true})
	c, err := lockkit.New(goredis.New(rdb), opts...)
	if err != nil {
		rdb.Close()
		s.t.Fatalf("lockkittest: lockkit.New: %v", err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx) // a test that closed it already gets ErrClosed here
		rdb.Close()
	})
	return c
}

// Steal gives key (a full lock key, as Lease.Key reports it) to another
// owner, as a second holder after an expiry or a failover would: the holder's
// next renewal or release finds it gone, its fn's ctx is cancelled and Do
// returns an error matching lockkit.ErrLockLost. Use it to test what the
// code under test does when its lock is lost mid-work.
func (s *Server) Steal(key string) {
	s.t.Helper()
	if err := s.m.Set(key, "lockkittest-thief"); err != nil {
		s.t.Fatalf("lockkittest: Steal(%q): %v", key, err)
	}
	s.m.SetTTL(key, time.Minute)
}

// NewClient starts an embedded store for t and returns a client on it: the
// shortest way to give code under test a working lockkit.Client.
func NewClient(t testing.TB, opts ...lockkit.Option) *lockkit.Client {
	t.Helper()
	return NewServer(t).NewClient(opts...)
}
