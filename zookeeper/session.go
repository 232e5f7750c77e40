package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/driver"
)

// errNotConnected is a session's answer while it has no live session on a
// server (connecting, or being re-established after an expiry).
var errNotConnected = errors.New("zookeeper: no session with the ensemble")

// session is one ZooKeeper session (a zk.Conn) asked for a timeout of
// sessionTimeout(ttl) (the TTL unless the ensemble timing is declared),
// shared by every domain with that TTL. go-zookeeper reconnects it by
// itself, keeping the session when the server still has it and making a new
// one after an expiry: the acquisitions record the session id they were made
// on, and an acquisition whose session is gone is lost.
type session struct {
	b       *backend
	ttl     time.Duration
	timeout time.Duration // asked of the server: sessionTimeout(ttl)
	conn    *zk.Conn

	mu         sync.Mutex
	sid        int64         // the session the server last granted, from the handshake
	negotiated time.Duration // its timeout
	changed    chan struct{} // closed and replaced at each state change
	authed     bool
	orphans    []orphan // nodes to delete once the session answers
	closed     bool
	kick       chan struct{}
	done       chan struct{}
}

// orphan is a node this backend created (or may have created) and must
// delete: a release or an abandoned create that failed on the connection.
// path is "" when only the token is known (a create whose reply was lost).
type orphan struct {
	parent string
	name   string // the node's name prefix: the encoded token and "-"
	k      acqKey // with name: the acquisition whose token names the node
	path   string
}

// zkLog receives go-zookeeper's log lines: the handshake's is how the
// negotiated session timeout is learnt (go-zookeeper v1.0.4 keeps it
// private); the rest is dropped, as a backend does not log.
type zkLog struct{ s *session }

const authenticatedFormat = "authenticated: id=%d, timeout=%d"

func (l zkLog) Printf(format string, args ...any) {
	if format != authenticatedFormat || len(args) != 2 {
		return
	}
	id, ok1 := args[0].(int64)
	ms, ok2 := args[1].(int32)
	if !ok1 || !ok2 {
		return
	}
	s := l.s
	s.mu.Lock()
	s.sid, s.negotiated = id, time.Duration(ms)*time.Millisecond
	s.mu.Unlock()
	s.broadcast()
}

func (b *backend) dial(ttl time.Duration) (*session, error) {
	s := &session{b: b, ttl: ttl, timeout: b.o.sessionTimeout(ttl), changed: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{})}
	conn, _, err := zk.Connect(b.hosts, s.timeout,
		zk.WithDialer(handshakeDialer(b.o.dial, s.timeout*2/3)),
		zk.WithLogger(zkLog{s}),
		zk.WithLogInfo(true), // the handshake's line is an info line: never off, whatever the default
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession {
				s.broadcast()
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect %v: %w", b.hosts, err)
	}
	s.conn = conn
	go s.sweep()
	return s, nil
}

// handshakeDialer dials as go-zookeeper does, and bounds each connection's
// session handshake by limit: the receive timeout (2/3 of the session
// timeout) that go-zookeeper already gives an established connection's
// reads. go-zookeeper v1.0.4 gives the connect request and its answer ten
// receive timeouts each (authenticate; the factor came from
// samuel/go-zookeeper#48, "to keep the test suite green"), and has no option
// for it. A session whose connection or reconnection went to a server that
// accepts but does not answer (stopped, hung: its kernel still completes
// the TCP handshake) waited there 6.7 session timeouts before it tried the
// next server, while the others served: a 1s session took its first lock
// after 6.6s, and after a paused leader a key stayed taken 7.5s past its
// holder's lease (TestEnsemble/PausedServerNewSession, PauseSessionServer).
// The Java client is stricter still: session timeout / number of servers.
func handshakeDialer(dial zk.Dialer, limit time.Duration) zk.Dialer {
	if dial == nil {
		dial = net.DialTimeout
	}
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, limit: limit}, nil
	}
}

// handshakeConn caps the first write deadline and the first read deadline
// set on a connection, the handshake's (go-zookeeper authenticates before
// anything else is sent or read), at limit from when they are set; later
// deadlines, the session's own, pass as they are.
type handshakeConn struct {
	net.Conn
	limit       time.Duration
	wrote, read atomic.Bool
}

func (c *handshakeConn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && !c.wrote.Swap(true) {
		t = capDeadline(t, c.limit)
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !c.read.Swap(true) {
		t = capDeadline(t, c.limit)
	}
	return c.Conn.SetReadDeadline(t)
}

func capDeadline(t time.Time, limit time.Duration) time.Time {
	if latest := time.Now().Add(limit); t.After(latest) {
		return latest
	}
	return t
}

func (s *session) broadcast() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// current is the live session's id, or ok false while there is none.
func (s *session) current() (sid int64, negotiated time.Duration, ok bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok = s.conn.State() == zk.StateHasSession && s.sid != 0 && s.sid == s.conn.SessionID()
	return s.sid, s.negotiated, ok, s.changed
}

// wait waits, within ctx, until the session is established, and returns its
// id. A server that granted a shorter timeout than asked (the TTL, or
// sessionTimeout's with the ensemble timing declared) fails it: a lease
// would outlive its session.
func (s *session) wait(ctx context.Context) (int64, error) {
	for {
		sid, neg, ok, changed := s.current()
		if ok {
			if neg < s.timeout {
				return 0, fmt.Errorf("zookeeper: the ensemble granted a session timeout of %v for the TTL %v, which needs %v (its maxSessionTimeout is lower): a lease would outlive its session; lower the domain's ttl, or raise maxSessionTimeout on the servers and declare it with zookeeper.WithSessionTimeouts: %w", neg, s.ttl, s.timeout, driver.ErrFinal)
			}
			if err := s.auth(ctx); err != nil {
				return 0, err
			}
			if err := s.checkEnsemble(ctx); err != nil {
				return 0, err
			}
			return sid, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, driver.Failure(fmt.Errorf("%w (state %v) within the command timeout: %w", errNotConnected, s.conn.State(), context.Cause(ctx)))
		}
	}
}

// checkEnsemble fails a session to a member of an ensemble when its timing
// is not declared (WithEnsembleTiming): the session timeout would be the
// TTL, which an ensemble does not keep (see withoutEnsembleTiming). Its servers are read once per backend from
// /zookeeper/config, which ZooKeeper 3.5+ keeps (empty on a standalone
// server).
func (s *session) checkEnsemble(ctx context.Context) error {
	if s.b.timingChecked.Load() {
		return nil
	}
	data, err := call(ctx, func() ([]byte, error) {
		data, _, err := s.conn.Get(configPath)
		return data, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		err, data = nil, nil // before ZooKeeper 3.5: no dynamic config
	}
	if err != nil {
		return classify(fmt.Errorf("zookeeper: read %s: %w", configPath, err))
	}
	if n := ensembleServers(data); n > 1 {
		return fmt.Errorf("zookeeper: %s is a member of an ensemble of %d servers (%s) and its timing is not declared: an ensemble's leader expires a session from what its followers report, so a follower that fails right after answering a renewal can free the lock while the lease is valid; declare zoo.cfg's tickTime and syncLimit with zookeeper.WithEnsembleTiming: %w", s.conn.Server(), n, configPath, driver.ErrFinal)
	}
	s.b.timingChecked.Store(true)
	return nil
}

// configPath is where ZooKeeper 3.5+ keeps its membership.
const configPath = "/zookeeper/config"

// ensembleServers counts the "server.N=" lines of a /zookeeper/config.
func ensembleServers(config []byte) int {
	n := 0
	for line := range strings.SplitSeq(string(config), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "server.") {
			n++
		}
	}
	return n
}

// auth adds the digest credentials once; go-zookeeper sends them again on
// every reconnect.
func (s *session) auth(ctx context.Context) error {
	if s.b.o.user == "" {
		return nil
	}
	s.mu.Lock()
	done := s.authed
	s.mu.Unlock()
	if done {
		return nil
	}
	_, err := call(ctx, func() (struct{}, error) {
		return struct{}{}, s.conn.AddAuth("digest", []byte(s.b.o.user+":"+s.b.o.password))
	})
	if err != nil {
		return classify(fmt.Errorf("zookeeper: digest auth: %w", err))
	}
	s.mu.Lock()
	s.authed = true
	s.mu.Unlock()
	return nil
}

// orphan records a node to delete once the session answers.
func (s *session) orphan(o orphan) {
	s.mu.Lock()
	s.orphans = append(s.orphans, o)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// sweep deletes orphans whenever the session is up: after a release or an
// abandoned create failed on the connection, the node would otherwise stay
// as long as the session lives and block every later acquire of its lock.
//
// A round that keeps orphans (no session, or a delete that failed other
// than by the server's final refusal) comes again after sweepRetry by itself: a kick
// (a state change, a new orphan) may never come while the session stays up
// and every acquire of the blocked lock is merely contended.
func (s *session) sweep() {
	var retry <-chan time.Time
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-retry:
		}
		retry = nil
		s.mu.Lock()
		todo := s.orphans
		s.orphans = nil
		s.mu.Unlock()
		if len(todo) == 0 {
			continue
		}
		_, _, ok, _ := s.current()
		var keep []orphan
		for _, o := range todo {
			// Even a node of an ended session is deleted by name: the
			// session may have ended after the node was made on its
			// successor (a create sent across a reconnect). A delete
			// the server did not refuse for good (retryable) keeps it
			// for the next round.
			if !ok {
				keep = append(keep, o)
			} else if err := s.deleteOrphan(o); err != nil && retryable(err) {
				keep = append(keep, o)
			}
		}
		if len(keep) > 0 {
			s.mu.Lock()
			s.orphans = append(s.orphans, keep...)
			s.mu.Unlock()
			retry = time.After(sweepRetry)
		}
	}
}

// sweepRetry is how soon a sweep that kept orphans runs again.
const sweepRetry = 250 * time.Millisecond

// retryable: an orphan's delete is tried again (on the session that
// follows, if this one ends: the node's name is the token, so deleting it is
// right; see deleteOrphan for a later acquisition of the same token) unless
// the server refused it for good (isFinal). Whatever else failed may have
// been the connection, in any of its forms: go-zookeeper hands a request
// whose write failed the write's own error (a *net.OpError: broken pipe,
// connection reset), not ErrConnectionClosed. An orphan dropped on such an
// error kept its node, and the lock, for as long as its session lived
// (TestLeftovers/SweepAfterWriteError; the fault harness's zk-kill-leader).
func retryable(err error) bool {
	return !isFinal(err)
}

func (s *session) deleteOrphan(o orphan) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.b.cmdTimeout)
	defer cancel()
	if o.path != "" {
		err := s.delete(ctx, o.path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	}
	// A node found by name is deleted only if it is not the node of the
	// token's acquisition now: a FIFO waiter keeps its token for its whole
	// wait, so an acquisition of the same token may have begun again since
	// this orphan was left, and made a node of the same name. Its node,
	// known once its create is answered, is kept; while it has a create
	// unanswered, the orphan waits for the next round. The listing comes
	// first: a create answered before the check below is the acquisition's
	// node, and one sent after it is not listed.
	if _, busy := s.b.liveNode(o.k); busy {
		return errLiveCreate
	}
	paths, err := s.findAll(ctx, o.parent, o.name)
	if err != nil || len(paths) == 0 {
		return err
	}
	live, busy := s.b.liveNode(o.k)
	if busy {
		return errLiveCreate
	}
	for _, path := range paths {
		if path == live {
			continue
		}
		if err := s.delete(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return nil
}

// errLiveCreate: an orphan found by name waits, as its token's acquisition
// has a create whose answer has not come (see deleteOrphan).
var errLiveCreate = errors.New("zookeeper: the token's acquisition has a create unanswered")

func (s *session) delete(ctx context.Context, path string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(path, -1) })
	return err
}

// find is the path of parent's child whose name starts with name (a token's
// node), "" when there is none (findAll's first).
func (s *session) find(ctx context.Context, parent, name string) (string, error) {
	paths, err := s.findAll(ctx, parent, name)
	if err != nil || len(paths) == 0 {
		return "", err
	}
	return paths[0], nil
}

// findAll is the paths of parent's children whose names start with name (a
// token's nodes). It syncs first, so that the server answering has seen
// every write committed before, a create whose reply was lost included.
func (s *session) findAll(ctx context.Context, parent, name string) ([]string, error) {
	if _, err := call(ctx, func() (string, error) { return s.conn.Sync(parent) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, err
	}
	children, err := call(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(parent)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, c := range children {
		if isNodeOf(c, name) {
			paths = append(paths, parent+"/"+c)
		}
	}
	return paths, nil
}

func (s *session) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.conn.Close()
}
