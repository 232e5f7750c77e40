package lockkit

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// dropProxy forwards TCP between a client and upstream. When armed, the
// first client write that match accepts is forwarded, the server is given
// time to run it, and then the connection is closed with its reply unread:
// the client sees a network error after its command ran. Every matching
// write is counted, dropped or not, so a test sees how often a command
// reached the server.
type dropProxy struct {
	ln       net.Listener
	upstream string
	armed    atomic.Bool
	match    atomic.Pointer[func([]byte) bool]
	seen     atomic.Int32 // matching writes forwarded
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startDropProxy(t *testing.T, upstream string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, upstream: upstream}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) Addr() string { return p.ln.Addr().String() }

// arm drops the connection of the next write that match accepts (after
// forwarding it), and counts every matching write from now on.
func (p *dropProxy) arm(match func([]byte) bool) {
	p.seen.Store(0)
	p.match.Store(&match)
	p.armed.Store(true)
}

func (p *dropProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		var dropping atomic.Bool
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 && !dropping.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					c.Close()
					return
				}
			}
		})
		p.wg.Go(func() {
			defer u.Close()
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					m := p.match.Load()
					hit := m != nil && (*m)(buf[:n])
					if hit {
						p.seen.Add(1)
					}
					drop := hit && p.armed.CompareAndSwap(true, false)
					if drop {
						dropping.Store(true) // the reply never reaches the client
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
					if drop {
						time.Sleep(100 * time.Millisecond) // the server runs it
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// A FIFO script is sent at most once (guarantee 7): when the connection
// drops after the FIFO acquire (or release) reached the server, go-redis
// does not send it again behind lockkit's back. The client is configured
// as the README shows (go-redis default retries). Before the FIFO scripts
// went through the send-at-most-once path, go-redis re-sent both: the
// acquire reached the server twice and TryAcquire returned a lease from the
// replay (it found its own grant), and the re-sent release found the lock
// gone and reported a loss.
func TestFIFOScriptsSentAtMostOnce(t *testing.T) {
	r := testserver.StartRedis(t)
	p := startDropProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := newClientOver(t, rdb)
	d := fifoDomain(t, c, fifoPolicy(10*time.Second, 5*time.Second))
	l := lockOn(d, "k")
	direct := r.Client(t)
	ctx := t.Context()
	// Warm up: the scripts are loaded (no NOSCRIPT later) and a connection
	// is open.
	if err := l.TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	key := []byte(l.Key() + fifo.WaitersSuffix)
	wake := []byte(fifo.ChannelSuffix)
	isAcquire := func(b []byte) bool { return bytes.Contains(b, key) && bytes.Contains(b, wake) }
	isRelease := func(b []byte) bool { return bytes.Contains(b, key) && !bytes.Contains(b, wake) }

	t.Run("acquire", func(t *testing.T) {
		p.arm(isAcquire)
		lease, err := l.TryAcquire(ctx)
		sent := p.seen.Load()
		t.Logf("TryAcquire with its connection dropped after the script ran: %v; acquire scripts that reached the server: %d", err, sent)
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatalf("TryAcquire returned a lease from a re-sent acquire (%d acquire scripts reached the server), want ErrUnavailable", sent)
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryAcquire = %v, want ErrUnavailable", err)
		}
		if sent != 1 {
			t.Errorf("%d acquire scripts reached the server, want 1", sent)
		}
		// The key the lost reply granted is given back (fail leaves the
		// queue, which releases a grant), at once: no TTL to wait for.
		pollFor(t, 5*time.Second, "the key given back", func() bool {
			return direct.Exists(ctx, l.Key(), l.Key()+fifo.QueueSuffix).Val() == 0
		})
		other := newClient(t, r)
		if err := lockOn(fifoDomain(t, other, fifoPolicy(10*time.Second, 5*time.Second)), "k").TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
			t.Errorf("another client after the give-back: %v, want the lock", err)
		}
	})

	t.Run("release", func(t *testing.T) {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.arm(isRelease)
		err = lease.Release(ctx)
		sent := p.seen.Load()
		t.Logf("Release with its connection dropped after the script ran: %v; release scripts that reached the server: %d", err, sent)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
			t.Errorf("Release = %v, want ErrUnavailable (not a loss: the lease held the lock until it released it)", err)
		}
		if sent != 1 {
			t.Errorf("%d release scripts reached the server, want 1", sent)
		}
		if n := direct.Exists(ctx, l.Key()).Val(); n != 0 {
			t.Errorf("the released key still exists")
		}
	})
}
