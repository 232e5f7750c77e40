package zookeeper

import (
	"net"
	"time"

	"github.com/lockkit/lockkit/driver"
)

// NodeName is the name prefix of token's lock nodes (the server appends the
// sequence).
func NodeName(token string) string { return tokenName(token) }

// LeaveOrphanByName gives the sweeper of key's acquisition for token what an
// earlier acquisition of the same token leaves when it was given up while
// its create was out and the create's answer was then lost (create's
// goroutine): a node of the token's name to delete, found by name. Then a
// node to delete by its path, which the sweeper reaches after it in the same
// round: its deletion says the first was dealt with.
func LeaveOrphanByName(be driver.Backend, key, token, then string) {
	b := be.(*backend)
	a := b.lookup(key, token, false)
	a.s.orphan(orphan{parent: a.parent, name: a.name, k: a.k})
	a.s.orphan(orphan{path: then})
}

// SessionServer is the server be's session for ttl is connected (or
// connecting) to, "" before it is dialled.
func SessionServer(be driver.Backend, ttl time.Duration) string {
	b := be.(*backend)
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[ttl]; s != nil {
		return s.conn.Server()
	}
	return ""
}

// WithDialer makes the backend's connections with dial (as zk.WithDialer),
// for tests that put a faulty connection between a session and its server.
func WithDialer(dial func(network, address string, timeout time.Duration) (net.Conn, error)) Option {
	return Option{func(o *options) { o.dial = dial }}
}
