package testserver

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DropProxy forwards TCP between a client and upstream, on 127.0.0.1. When
// armed, the first client write that the match accepts is forwarded, the
// server is given time to run it, and then the connection is closed with
// its reply unread: the client sees a network error after its command ran.
// Every matching write is counted, dropped or not, so a test sees how often
// a command reached the server (a re-send is a second one).
type DropProxy struct {
	ln       net.Listener
	upstream string
	armed    atomic.Bool
	match    atomic.Pointer[func([]byte) bool]
	seen     atomic.Int32 // matching writes forwarded
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// StartDropProxy starts a DropProxy to upstream; the test's cleanup stops
// it and closes every connection it forwards.
func StartDropProxy(t testing.TB, upstream string) *DropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DropProxy{ln: ln, upstream: upstream}
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

// Addr is the proxy's address, for the client.
func (p *DropProxy) Addr() string { return p.ln.Addr().String() }

// Arm drops the connection of the next write that match accepts (after
// forwarding it), and counts every matching write from now on.
func (p *DropProxy) Arm(match func([]byte) bool) {
	p.seen.Store(0)
	p.match.Store(&match)
	p.armed.Store(true)
}

// Seen is how many matching writes were forwarded since Arm.
func (p *DropProxy) Seen() int32 { return p.seen.Load() }

func (p *DropProxy) accept() {
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
