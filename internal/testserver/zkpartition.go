package testserver

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// WithZKQuorumProxies puts a byte-level TCP proxy on every ordered pair of members'
// quorum channel: member X's zoo.cfg lists each other member Y's quorum port as the
// proxy X→Y (its own entry, and every election port, stay the real ones). A follower
// connects to its leader's quorum port, so the proxy follower→leader carries their
// channel. Partition and Heal cut and restore a pair's quorum channel.
func WithZKQuorumProxies() ZKOption {
	return func(z *ZooKeeper) { z.quorumProxies = true }
}

// QuorumProxy forwards bytes between one member and another's quorum port. Blackholed,
// it drops every byte both ways but keeps the connections open: a partition, not a
// reset (new connections are accepted, and dropped likewise).
type QuorumProxy struct {
	From, To int // member indexes: From's zoo.cfg names this proxy for To
	ln       net.Listener
	target   string

	blackhole atomic.Bool
	accepted  atomic.Int64
	dropped   atomic.Int64

	mu    sync.Mutex
	conns map[*proxyPair]struct{}
}

type proxyPair struct {
	a, b  net.Conn
	dirty atomic.Bool // saw a byte dropped: its stream is corrupt
}

func (p *proxyPair) close() {
	_ = p.a.Close()
	_ = p.b.Close()
}

func startQuorumProxy(t testing.TB, from, to int, target string) (*QuorumProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &QuorumProxy{From: from, To: to, ln: ln, target: target, conns: map[*proxyPair]struct{}{}}
	t.Cleanup(p.close)
	go p.accept()
	return p, nil
}

// Port is the proxy's listening port.
func (p *QuorumProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Accepted counts the connections the proxy took; Dropped the bytes it dropped.
func (p *QuorumProxy) Accepted() int64 { return p.accepted.Load() }

// Dropped counts the bytes dropped while blackholed.
func (p *QuorumProxy) Dropped() int64 { return p.dropped.Load() }

// Open counts the proxy's open connections.
func (p *QuorumProxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Blackhole drops every byte both ways from now on, the connections kept open.
func (p *QuorumProxy) Blackhole() { p.blackhole.Store(true) }

// Heal forwards bytes again. A connection that lost bytes is closed (its stream is
// corrupt): the members connect again.
func (p *QuorumProxy) Heal() {
	p.blackhole.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if c.dirty.Load() {
			c.close()
			delete(p.conns, c)
		}
	}
}

func (p *QuorumProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.close()
	}
	p.conns = map[*proxyPair]struct{}{}
}

func (p *QuorumProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		go p.serve(c)
	}
}

func (p *QuorumProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	pair := &proxyPair{a: client, b: server}
	p.mu.Lock()
	p.conns[pair] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if p.blackhole.Load() {
					p.dropped.Add(int64(n))
					pair.dirty.Store(true)
				} else if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		pair.close()
	}
	wg.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, pair)
	p.mu.Unlock()
}

// QuorumLink is the proxy through which member from reaches member to's quorum port
// (indexes into Members); nil without WithZKQuorumProxies.
func (z *ZooKeeper) QuorumLink(from, to int) *QuorumProxy {
	if z.proxies == nil {
		return nil
	}
	return z.proxies[[2]int{from, to}]
}

// Partition blackholes the quorum channel between members a and b, both ways (the
// proxies a→b and b→a: whichever carries their connection).
func (z *ZooKeeper) Partition(t testing.TB, a, b int) {
	t.Helper()
	if z.proxies == nil {
		t.Fatal("testserver: Partition needs WithZKQuorumProxies")
	}
	z.QuorumLink(a, b).Blackhole()
	z.QuorumLink(b, a).Blackhole()
}

// Heal undoes Partition.
func (z *ZooKeeper) Heal(t testing.TB, a, b int) {
	t.Helper()
	if z.proxies == nil {
		t.Fatal("testserver: Heal needs WithZKQuorumProxies")
	}
	z.QuorumLink(a, b).Heal()
	z.QuorumLink(b, a).Heal()
}
