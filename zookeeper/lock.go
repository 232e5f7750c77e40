package zookeeper

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/driver"
)

// acq is one acquisition: its token's node under the lock's path.
type acq struct {
	k      acqKey
	s      *session
	parent string // the lock's path
	name   string // the node's name prefix: encoded token + "-"

	mu       sync.Mutex
	sid      int64         // the session its node was created on
	path     string        // the node, "" until a create was answered
	czxid    int64         // the node's Czxid, 0 until read (only fencing reads it at once)
	verify   bool          // the node was found by its token: check its owner once
	granted  bool          // an attempt found the node lowest
	pred     string        // a queued node's predecessor, "" when none
	inflight chan struct{} // closed when the create in flight ends; nil when none
	unsure   bool          // a create was sent whose answer was never seen
	released bool          // given up: a create answered late is undone
	until    time.Time     // the lease's end on this process (keepUntil)
	timer    *time.Timer
}

// nodePath maps a lock key to its path: the key escaped into one node name
// below the base.
func (b *backend) nodePath(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("zookeeper: empty lock key: %w", driver.ErrFinal)
	}
	if name := escape(key); len(name) > maxName {
		return "", fmt.Errorf("zookeeper: lock key of %d bytes is too long: its node name would be %d bytes, the ZooKeeper backend's limit is %d: %w", len(key), len(name), maxName, driver.ErrFinal)
	}
	return LockPath(b.base, key), nil
}

// LockPath is the node under which key's acquisitions queue, for root (the
// chroot, if any, comes before it): what an operator lists to see who holds
// key, and in which order the waiters come. Each child is named by its
// acquisition's token and sequence; its data is the holder's description.
func LockPath(root, key string) string {
	if root == "/" {
		root = ""
	}
	return root + "/" + escape(key)
}

// escape makes s one valid node name: bytes outside [A-Za-z0-9_.:=+,@-]
// become %XX, as do the dots of "." and "..".
func escape(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("_.:=+,@-", c) >= 0:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	if n := sb.String(); n != "." && n != ".." {
		return n
	}
	return strings.Repeat("%2E", len(s))
}

// tokenName is the node name prefix of token: the token itself when it is
// made of safe characters (lockkit's are base32), else ~hex.
func tokenName(token string) string {
	safe := token != "" && len(token) <= 256
	for i := 0; safe && i < len(token); i++ {
		c := token[i]
		safe = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '=' || c == '.'
	}
	if safe {
		return token + "-"
	}
	return fmt.Sprintf("~%x-", token)
}

// tokenOf is the token a lock node's name carries (tokenName's inverse);
// "" when child is not a lock node.
func tokenOf(child string) string {
	prefix, _, ok := parseNode(child)
	if !ok {
		return ""
	}
	name := prefix[:len(prefix)-1]
	if hexed, ok := strings.CutPrefix(name, "~"); ok {
		tok, err := hex.DecodeString(hexed)
		if err != nil {
			return ""
		}
		return string(tok)
	}
	return name
}

// isNodeOf reports whether child is a node created with the name prefix
// name (followed by the server's sequence).
func isNodeOf(child, name string) bool {
	prefix, _, ok := parseNode(child)
	return ok && prefix == name
}

// parseNode splits a lock node's name into the name prefix it was created
// with (up to and including the '-' before the sequence) and the sequence
// the server appended; ok is false when child is not a lock node.
//
// The sequence is the parent's cversion at the create, a signed 32-bit
// counter that every child create and delete advances, formatted "%010d":
// past 2147483647 it wraps to -2147483648 and counts up through the
// negatives, so the suffix is 10 digits (0..2147483647), or a minus and 9
// digits (-999999999..-1), or a minus and 10 (-2147483648..-1000000000).
// Only that exact form is a sequence. The '-' before it ends the prefix: a
// prefix lockkit makes (tokenName) has no other '-', so in "T--1000000000"
// the sequence is -1000000000 (prefix "T-"), never 1000000000 (prefix
// "T--"), which is why the longer suffix is tried first.
func parseNode(child string) (prefix string, seq int32, ok bool) {
	for _, n := range [2]int{11, 10} {
		i := len(child) - n - 1 // the separator
		if i < 1 || child[i] != '-' {
			continue
		}
		if !seqForm(child[i+1:]) {
			continue
		}
		v, err := strconv.ParseInt(child[i+1:], 10, 32)
		if err != nil {
			continue
		}
		return child[:i+1], int32(v), true
	}
	return "", 0, false
}

// seqForm reports whether suf is written as "%010d" writes a number: ten
// digits, a minus and nine digits (not all zeros), or a minus and ten
// digits (the first not a zero). Checked by hand, without formatting: an
// attempt parses every child of the lock.
func seqForm(suf string) bool {
	digits := strings.TrimPrefix(suf, "-")
	for i := range len(digits) {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	neg := len(digits) < len(suf)
	switch {
	case !neg:
		return len(suf) == 10
	case len(suf) == 10:
		return strings.Trim(digits, "0") != ""
	default:
		return len(suf) == 11 && digits[0] != '0'
	}
}

// seqBefore reports whether sequence a was issued before b: serial
// arithmetic on the wrapping 32-bit counter (RFC 1982), so that
// 2147483647 comes before -2147483648, and -5 before 0. It is an order
// only among sequences less than 2^31 apart: it assumes that the live
// children of one lock's parent always span far fewer than 2^31 sequence
// numbers (about a billion creates and deletes under the lock while one of
// its nodes lives). Past that, a node made later reads as made earlier.
func seqBefore(a, b int32) bool { return int32(uint32(a)-uint32(b)) < 0 }

// lockNode is a child parsed by parseNode.
type lockNode struct {
	name string
	seq  int32
}

// before is the queue's order, the one rule every reader of it uses (an
// attempt's place, the predecessor a waiter watches, the holder a reader
// sees): by sequence (seqBefore), and by name for two of one sequence,
// which the server never gives two live children of one parent.
func (n lockNode) before(m lockNode) bool {
	if n.seq != m.seq {
		return seqBefore(n.seq, m.seq)
	}
	return n.name < m.name
}

// lockNodes is the lock nodes among children.
func lockNodes(children []string) []lockNode {
	ns := make([]lockNode, 0, len(children))
	for _, c := range children {
		if _, seq, ok := parseNode(c); ok {
			ns = append(ns, lockNode{c, seq})
		}
	}
	return ns
}

// queuePlace is own's place among children (own's node is a lock node
// name): pos counts the lock nodes before it (0 holds the lock), pred is
// the last of them, "" when none.
func queuePlace(own string, children []string) (pos int, pred string) {
	_, seq, ok := parseNode(own)
	if !ok {
		// Never a node this backend made: behind everything, so never
		// granted.
		return len(children), ""
	}
	me := lockNode{own, seq}
	var p lockNode
	for _, n := range lockNodes(children) {
		if n.name == own || !n.before(me) {
			continue
		}
		if pos == 0 || p.before(n) {
			p = n
		}
		pos++
	}
	return pos, p.name
}

// lowestNode is the first lock node among children (the holder's), ""
// when there is none.
func lowestNode(children []string) string {
	var low lockNode
	for i, n := range lockNodes(children) {
		if i == 0 || n.before(low) {
			low = n
		}
	}
	return low.name
}

// acquisition is key's acquisition for token, made (with its session) when
// there is none yet.
func (b *backend) acquisition(req *driver.Request) (*acq, error) {
	parent, err := b.nodePath(req.Key)
	if err != nil {
		return nil, err
	}
	s, err := b.session(req.TTL)
	if err != nil {
		return nil, err
	}
	k := acqKey{req.Key, req.Token}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.acqs[k]; a != nil {
		if a.s == s {
			return a, nil
		}
		return nil, fmt.Errorf("zookeeper: token of %s reused with another TTL: %w", req.Key, driver.ErrFinal)
	}
	a := &acq{k: k, s: s, parent: parent, name: tokenName(req.Token)}
	b.acqs[k] = a
	return a, nil
}

func (b *backend) lookup(key, token string, remove bool) *acq {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := acqKey{key, token}
	a := b.acqs[k]
	if remove {
		delete(b.acqs, k)
	}
	return a
}

// liveNode is the node of k's acquisition now, if there is one; busy when
// it has a create whose answer has not come, or whose answer was lost (its
// node, if any, is not known yet).
func (b *backend) liveNode(k acqKey) (path string, busy bool) {
	b.mu.Lock()
	a := b.acqs[k]
	b.mu.Unlock()
	if a == nil {
		return "", false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight != nil || a.unsure {
		return "", true
	}
	return a.path, false
}

// Acquire is one polling attempt: the acquisition's node is created (or
// found again), and the lock is granted when it is the lowest; otherwise
// the node is deleted and the answer is driver.ErrContended.
func (b *backend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	a, err := b.acquisition(req)
	if err != nil {
		return 0, classify(err)
	}
	sent := time.Now()
	pos, _, err := b.attempt(ctx, a, req)
	switch {
	case err != nil:
		return 0, classify(err)
	case pos > 0:
		b.lookup(req.Key, req.Token, true)
		if _, err := a.release(ctx); err != nil {
			return 0, classify(err)
		}
		return 0, driver.ErrContended
	}
	a.mu.Lock()
	a.granted = true
	a.mu.Unlock()
	if !b.keepUntil(a, sent.Add(req.TTL)) {
		return 0, givenUp(req.Key)
	}
	if !req.Fencing {
		return 0, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.czxid, nil
}

// attempt makes sure a has a node on the live session, then lists the
// lock's children: pos is the node's place (0 holds the lock), pred its
// predecessor's path.
func (b *backend) attempt(ctx context.Context, a *acq, req *driver.Request) (pos int, pred string, err error) {
	s := a.s
	sid, err := s.wait(ctx)
	if err != nil {
		return 0, "", err
	}
	if err := a.ensureNode(ctx, sid, []byte(req.Holder)); err != nil {
		return 0, "", err
	}
	a.mu.Lock()
	path := a.path
	// The node's stat (Czxid, owner) is read when the fence is asked for
	// or the node was found by token; a node this attempt created on sid
	// is known to be sid's.
	known := !a.verify && (a.czxid != 0 || !req.Fencing)
	a.mu.Unlock()
	// The children and (once) the node's stat, in flight together: one
	// round trip after the create, as the bare recipe's listing.
	var (
		wg   sync.WaitGroup
		stat *zk.Stat
		serr error
	)
	if !known {
		wg.Go(func() {
			stat, serr = call(ctx, func() (*zk.Stat, error) {
				ok, st, err := s.conn.Exists(path)
				if err == nil && !ok {
					err = zk.ErrNoNode
				}
				return st, err
			})
		})
	}
	children, err := call(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(a.parent)
		return c, err
	})
	wg.Wait()
	if err == nil {
		err = serr
	}
	if errors.Is(err, zk.ErrNoNode) {
		// The node is gone: its session ended between the create and now.
		a.forget(path)
		return 0, "", driver.Failure(fmt.Errorf("zookeeper: %s: the acquisition's node vanished (its session ended)", req.Key))
	}
	if err != nil {
		return 0, "", err
	}
	if !known {
		if stat.EphemeralOwner != sid {
			// The node is this acquisition's (its name is the token), made
			// on another session than the one the create was sent for: a
			// create that waited in go-zookeeper's send queue while the
			// connection was down goes out on the session that replaced an
			// expired one. That session is live: forgotten, the node would
			// block the lock for as long as this process runs. It goes to
			// the sweeper, and the attempt fails.
			a.forget(path)
			s.orphan(orphan{path: path})
			return 0, "", driver.Failure(fmt.Errorf("zookeeper: %s: the node belongs to session %#x, not to this one (%#x)", req.Key, stat.EphemeralOwner, sid))
		}
		a.mu.Lock()
		a.czxid, a.verify = stat.Czxid, false
		a.mu.Unlock()
	}
	own := path[strings.LastIndexByte(path, '/')+1:]
	for _, c := range children {
		if c != own && isNodeOf(c, a.name) {
			// Another node of this token: an earlier create's, whose
			// answer was lost (this acquisition found and took the other
			// one), or an earlier acquisition's of the same token. It is
			// deleted; till then it counts as any other node.
			s.orphan(orphan{path: a.parent + "/" + c})
		}
	}
	pos, predName := queuePlace(own, children)
	if predName != "" {
		pred = a.parent + "/" + predName
	}
	if !slices.Contains(children, own) {
		a.forget(path)
		return 0, "", driver.Failure(fmt.Errorf("zookeeper: %s: the acquisition's node is not listed (its session ended)", req.Key))
	}
	a.mu.Lock()
	a.pred = pred
	a.mu.Unlock()
	return pos, pred, nil
}

// forget drops a node that is gone, so that the next attempt creates anew.
func (a *acq) forget(path string) {
	a.mu.Lock()
	if a.path == path {
		a.path, a.czxid, a.sid, a.pred, a.verify, a.granted = "", 0, 0, "", false, false
	}
	a.mu.Unlock()
}

// ensureNode makes sure a has a node of session sid: the one it created, or
// the one a create whose reply was lost left (found by its token), or a new
// one. A node of another (ended) session is never used.
func (a *acq) ensureNode(ctx context.Context, sid int64, data []byte) error {
	a.mu.Lock()
	if a.inflight != nil {
		ch := a.inflight
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return driver.Failure(fmt.Errorf("zookeeper: an earlier create is still unanswered: %w", context.Cause(ctx)))
		}
		a.mu.Lock()
	}
	if a.path != "" && a.sid == sid {
		a.mu.Unlock()
		return nil
	}
	unsure, oldSid, old := a.unsure, a.sid, a.path
	a.path, a.czxid, a.pred, a.verify, a.granted = "", 0, "", false, false
	a.mu.Unlock()
	if old != "" {
		// A node of an earlier session: gone with it, unless the create
		// went out on a later one (see attempt). Deleted, never forgotten.
		a.s.orphan(orphan{path: old})
	}
	if unsure && oldSid == sid {
		// The reply of an earlier create was lost: its node, if the server
		// made it, is found by its token (after a sync) and used.
		path, err := a.s.find(ctx, a.parent, a.name)
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.unsure = false
		if path != "" {
			a.path, a.verify = path, true
			a.mu.Unlock()
			return nil
		}
		a.mu.Unlock()
	}
	return a.create(ctx, sid, data)
}

// create sends the acquisition's create. Its answer is recorded even when
// it comes after ctx ended: a node created for an acquisition already given
// up is deleted at once, and a create whose answer is lost is looked for by
// token on the next attempt or release.
func (a *acq) create(ctx context.Context, sid int64, data []byte) error {
	s := a.s
	if ctx.Err() != nil {
		// Nothing is sent for a ctx already done: a create sent anyway
		// would make a node that is deleted only after its answer, and
		// meanwhile blocks the lock (a CPU hog rehearsal's
		// TestConformance/CtxCancelled: another client's TryDo right
		// after a Do with a cancelled ctx found the key held).
		return driver.Failure(fmt.Errorf("zookeeper: create of a node for %s not sent: %w", a.k.key, context.Cause(ctx)))
	}
	ch := make(chan struct{})
	a.mu.Lock()
	a.inflight, a.sid, a.unsure = ch, sid, true
	a.mu.Unlock()
	var cerr error
	go func() {
		defer close(ch)
		path, err := s.createNode(a.parent, a.name, data)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.inflight = nil
		cerr = err
		if err != nil {
			// The server made nothing: it refused the create, or the
			// request was never all written (a write's own error, which
			// go-zookeeper hands back as it is). A create lost with its
			// connection after it was written may have been made.
			if errors.Is(err, zk.ErrSessionExpired) || !isConnErr(err) {
				a.unsure = false
			}
			if a.released && a.unsure {
				s.orphan(orphan{parent: a.parent, name: a.name, k: a.k})
			}
			return
		}
		a.unsure = false
		if a.released {
			s.orphan(orphan{path: path})
			return
		}
		a.path = path
		// A session change while the create was out may have sent it on
		// the new session: the next attempt reads the node's owner.
		a.verify = a.verify || s.conn.SessionID() != sid
	}()
	select {
	case <-ch:
		return cerr
	case <-ctx.Done():
		// Named by the lock's key, not its node path: lockkit shows a key
		// as its key mode says (hashed in log lines), which it cannot do
		// for the key escaped into a path.
		return driver.Failure(fmt.Errorf("zookeeper: create of a node for %s unanswered: %w", a.k.key, context.Cause(ctx)))
	}
}

func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrClosing)
}

// createNode creates parent/name<seq>, ephemeral and sequential, creating
// the lock's parent (a container node, which the server deletes once it is
// empty) and the base path when missing.
func (s *session) createNode(parent, name string, data []byte) (string, error) {
	b := s.b
	for range 3 {
		path, err := s.conn.Create(parent+"/"+name, data, zk.FlagEphemeralSequential, b.acl)
		if !errors.Is(err, zk.ErrNoNode) {
			return path, err
		}
		_, err = s.conn.CreateContainer(parent, nil, zk.FlagContainer, b.acl)
		if errors.Is(err, zk.ErrNoNode) {
			if err = s.ensureBase(); err == nil {
				_, err = s.conn.CreateContainer(parent, nil, zk.FlagContainer, b.acl)
			}
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return "", err
		}
	}
	return "", errors.New("zookeeper: the lock's parent node keeps vanishing under the create")
}

// ensureBase creates the chroot and root nodes that are missing.
func (s *session) ensureBase() error {
	p := ""
	for seg := range strings.SplitSeq(strings.TrimPrefix(s.b.base, "/"), "/") {
		p += "/" + seg
		if _, err := s.conn.Create(p, nil, 0, s.b.baseACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper: create %s: %w", p, err)
		}
	}
	return nil
}

// Extend reads the acquisition's node on its session: held when the node is
// this acquisition's (same Czxid, owned by the session it was made on) and
// the answer came on that session. The read, answered, is the session's
// keep-alive evidence: the server had it alive when the read arrived, after
// it was sent, so its session outlives the send by the granted timeout.
func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	a := b.lookup(key, token, false)
	if a == nil {
		return false, nil
	}
	a.mu.Lock()
	path, czxid, sid, granted := a.path, a.czxid, a.sid, a.granted
	a.mu.Unlock()
	if path == "" || !granted {
		return false, nil
	}
	s := a.s
	if cur := s.conn.SessionID(); cur != sid {
		b.abandon(a) // the session ended, and its nodes with it
		return false, nil
	}
	if _, err := s.wait(ctx); err != nil {
		return false, classify(err)
	}
	sent := time.Now()
	stat, err := call(ctx, func() (*zk.Stat, error) {
		ok, st, err := s.conn.Exists(path)
		if err == nil && !ok {
			st = nil
		}
		return st, err
	})
	if err != nil {
		return false, classify(err)
	}
	if stat == nil || (czxid != 0 && stat.Czxid != czxid) || stat.EphemeralOwner != sid || s.conn.SessionID() != sid {
		b.abandon(a)
		return false, nil
	}
	if czxid == 0 {
		a.mu.Lock()
		if a.path == path {
			a.czxid = stat.Czxid // pinned from now on
		}
		a.mu.Unlock()
	}
	// The backend's own expiry may have given the node up while the read
	// was out (its timer came first): then the lease is not extended.
	return b.keepUntil(a, sent.Add(ttl)), nil
}

// givenUp: the acquisition was given up (its own expiry, a release) while
// an attempt of it was out; its node is the sweeper's, so nothing is granted
// on it.
func givenUp(key string) error {
	return driver.Failure(fmt.Errorf("zookeeper: %s: the acquisition was given up while its attempt was out", key))
}

// keepUntil sets when a's lease ends if it is not extended again: then its
// node is deleted by the backend itself. The session only ends a node when
// its process stops talking to the ensemble; a process that lives on but
// stops extending a lease (a lost lease nobody released, a renewal that
// stopped) would otherwise keep the lock for as long as it runs.
// kept is false when a was given up already: nothing is extended then.
func (b *backend) keepUntil(a *acq, until time.Time) (kept bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return false
	}
	a.until = until
	if a.timer == nil {
		a.timer = time.AfterFunc(time.Until(until), func() { b.expire(a) })
	} else {
		a.timer.Reset(time.Until(until))
	}
	return true
}

// expire gives up an acquisition whose lease ended without an extend.
func (b *backend) expire(a *acq) {
	a.mu.Lock()
	if left := time.Until(a.until); !a.released && left > 0 {
		a.timer.Reset(left)
		a.mu.Unlock()
		return
	}
	// Given up in the same hold of a.mu that found the lease ended: an
	// extend answered after this finds a released (keepUntil), never a
	// lease it would keep while its node goes to the sweeper.
	b.abandonLocked(a)
}

// abandon gives an acquisition up without a request of its own: it leaves
// the backend's map, and its node (if it has one, or may have one) goes to
// the sweeper, which deletes it. Deleting is right: the node's name is this
// acquisition's token, and a node found by that name is kept when it is a
// later acquisition's of the same token (session.deleteOrphan).
func (b *backend) abandon(a *acq) {
	a.mu.Lock()
	b.abandonLocked(a)
}

// abandonLocked is abandon with a.mu held; it unlocks a.mu.
func (b *backend) abandonLocked(a *acq) {
	if a.released {
		a.mu.Unlock()
		return
	}
	a.released = true
	if a.timer != nil {
		a.timer.Stop()
	}
	path, unsure, inflight := a.path, a.unsure, a.inflight != nil
	a.mu.Unlock()
	b.mu.Lock()
	if b.acqs[a.k] == a {
		delete(b.acqs, a.k)
	}
	b.mu.Unlock()
	switch {
	case inflight:
		// The create's goroutine deletes what it made.
	case path != "":
		a.s.orphan(orphan{path: path})
	case unsure:
		a.s.orphan(orphan{parent: a.parent, name: a.name, k: a.k})
	}
}

// Release deletes the acquisition's node, if it still is this acquisition's
// on its session. A delete that fails on the connection leaves the node to
// the session's sweeper, which deletes it once the session answers again.
func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	a := b.lookup(key, token, true)
	if a == nil {
		return false, nil
	}
	held, err := a.release(ctx)
	return held, classify(err)
}

func (a *acq) release(ctx context.Context) (bool, error) {
	s := a.s
	a.mu.Lock()
	if a.released {
		a.mu.Unlock()
		return false, nil // expired: the sweeper has its node
	}
	a.released = true
	if a.timer != nil {
		a.timer.Stop()
	}
	path, sid, granted, unsure, inflight := a.path, a.sid, a.granted, a.unsure, a.inflight != nil
	a.mu.Unlock()
	if inflight {
		return false, nil // the create's goroutine deletes what it made
	}
	if path == "" {
		if unsure {
			s.orphan(orphan{parent: a.parent, name: a.name, k: a.k})
		}
		return false, nil
	}
	if s.conn.SessionID() != sid {
		// The session ended, and its nodes with it: the lease was lost.
		// The node is still deleted by name, in case it was made on the
		// session that followed.
		s.orphan(orphan{path: path})
		return false, nil
	}
	err := s.delete(ctx, path)
	switch {
	case err == nil:
		return granted, nil
	case errors.Is(err, zk.ErrNoNode):
		return false, nil
	}
	s.orphan(orphan{path: path})
	return false, fmt.Errorf("zookeeper: delete %s's node %s: %w (deleted when the session answers again)", a.k.key, path[strings.LastIndexByte(path, '/')+1:], err)
}
