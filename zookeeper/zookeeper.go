// Package zookeeper puts lockkit's locks in an Apache ZooKeeper ensemble,
// through the public driver seam only:
//
//	client, err := lockkit.New(zookeeper.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zookeeper.WithEnsembleTiming(2*time.Second, 5))) // zoo.cfg's tickTime and syncLimit
//
// An ensemble needs its timing declared (WithEnsembleTiming); a standalone
// server does not.
//
// It lives in its own package so that programs on other stores do not link
// go-zookeeper: package lockkit does not import it.
//
// The recipe. Each acquisition creates one ephemeral sequential node under
// the lock's path (<root>/<escaped key>/<token>-<sequence>); the lowest
// sequence holds the lock. The node's name carries the acquisition's token,
// so that after a create whose reply was lost the node is found again by
// listing the children, and is then used or deleted, never left behind. A
// polling attempt that does not hold deletes its node and answers
// driver.ErrContended; a FIFO waiter (wait: fifo) keeps its node and watches
// only its predecessor, so a release wakes one waiter (no herd). Release and
// Extend check this acquisition's own node (path, Czxid and owning session),
// never the key's name. The fence is the node's Czxid, which increases
// strictly across the ensemble and its leader changes; it compares only with
// other ZooKeeper fences. The holder read (driver.HolderReader, what an
// election's Leader needs) is the lowest node: its token, its data (the
// holder's description) and its Czxid.
//
// The lease is the session. A node lives as long as the session that created
// it, and the server fixes a session's timeout when it connects: so the
// backend owns its connections, one session per distinct domain TTL, made on
// the first acquire with that TTL and asked for a timeout equal to it (or,
// with the ensemble's timing declared, WithEnsembleTiming, longer: see
// there). A
// server that grants a shorter timeout than asked fails the acquire (a lease
// would outlive its session); the server's bounds (2 and 20 ticks unless
// configured) are declared with WithSessionTimeouts, and lockkit.New refuses
// a domain whose TTL lies outside them, naming it. Extend is a read of the
// acquisition's node on its session: answered, it proves the session alive
// when it was sent, so the Client counts the lease from that send; a client
// that cannot reach the ensemble gets no answer, and its lease ends on its
// own clock before the server could have expired the session.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/zkhook"
)

// Default session timeout bounds: ZooKeeper's own, 2 and 20 ticks
// (minSessionTimeout, maxSessionTimeout), of the tick declared with
// WithEnsembleTiming, or of ZooKeeper's default tickTime of 2s (4s and 40s).
const (
	defaultTick = 2 * time.Second
	// defaultRoot is the node under which lock nodes live.
	defaultRoot = "/lockkit"
)

// maxName bounds a lock's escaped node name: ZooKeeper keeps whole paths in
// every request and watch, and a server refuses packets over jute.maxbuffer.
const maxName = 4096

// Option tunes the ZooKeeper backend.
type Option struct{ set func(*options) }

type options struct {
	root                   string
	user, password         string
	minSession, maxSession time.Duration
	sessionsSet            bool // WithSessionTimeouts was given
	// tick and syncLimit: the ensemble's timing, when declared
	// (WithEnsembleTiming: timingSet).
	tick      time.Duration
	syncLimit int
	timingSet bool
	// undeclared: the session timeout is the TTL even on an ensemble
	// (withoutEnsembleTiming: lockkit's own fault tests only).
	undeclared bool
	// dial makes each session's connections: net.DialTimeout unless a test
	// puts a faulty connection in between (export_test.go).
	dial zk.Dialer
}

// WithRoot sets the node under which lock nodes live (below the chroot of
// the connection string, if it has one). Default "/lockkit".
func WithRoot(path string) Option { return Option{func(o *options) { o.root = path }} }

// WithDigestAuth authenticates every session with the digest scheme as
// user:password, and creates lock nodes (and their parents) with an ACL that
// gives this identity every permission and anyone else read only: another
// identity can see who holds a lock but cannot delete its node or queue on it.
func WithDigestAuth(user, password string) Option {
	return Option{func(o *options) { o.user, o.password = user, password }}
}

// WithSessionTimeouts declares the ensemble's minSessionTimeout and
// maxSessionTimeout (zoo.cfg; 2 and 20 ticks by default). A domain's TTL sets
// its session timeout (equal to it, or sessionTimeout's with
// WithEnsembleTiming), so lockkit.New refuses a domain whose session timeout
// would lie outside them. Default 2 and 20 ticks of the tick declared with
// WithEnsembleTiming, else 4s and 40s (tickTime 2s).
func WithSessionTimeouts(min, max time.Duration) Option {
	return Option{func(o *options) { o.minSession, o.maxSession, o.sessionsSet = min, max, true }}
}

// WithEnsembleTiming declares the ensemble's tickTime and syncLimit (zoo.cfg),
// and makes leases safe against a follower cut off from its leader.
//
// A session's timeout is decided by the leader, from the activity its
// followers report on their pings. A follower cut off from the leader (a
// network partition between servers) keeps answering its clients from its
// stale state for up to syncLimit × tickTime, while the leader hears nothing
// of their sessions and expires them after their timeout. A holder whose
// session is on that follower keeps extending its lease on reads the follower
// answers, while the leader deletes its node and grants the key to another
// client: two valid leases (TestQuorumPartition: the second was granted with
// the first valid for another 0.85–0.92 s, TTL 1 s, syncLimit × tickTime 2 s).
//
// Declared, each session asks for a timeout of 2 × TTL + 3/2 × (syncLimit ×
// tickTime + tickTime) (sessionTimeout), so that the leader expires a
// session only after every lease extended on a cut-off follower's answers
// has ended. The cost: the node of a holder whose process dies stays until
// that longer timeout, and the TTL must leave it within the declared
// session timeout bounds (WithSessionTimeouts; MaxTTL). Undeclared, the
// session timeout is the TTL, as before.
func WithEnsembleTiming(tick time.Duration, syncLimit int) Option {
	return Option{func(o *options) { o.tick, o.syncLimit, o.timingSet = tick, syncLimit, true }}
}

// withoutEnsembleTiming keeps the session timeout equal to the TTL on an
// ensemble whose timing is not declared: for lockkit's own fault tests only
// (internal/zkhook), whose histories were written for it. Users cannot ask
// for it: on an ensemble the leader decides a session's expiry, from the
// activity each follower reports when the leader pings it (every half tick),
// so a follower that fails (is killed, paused, restarted) right after
// answering a lease's renewal takes that renewal's report with it; the leader
// then counts the session's timeout from an earlier request, up to a renew
// interval and half a tick earlier, and can free the lock while the lease is
// valid (TestFollowerFailsAfterExtend: 336–592 ms of overlap with TTL 3 s,
// tick 100 ms). So New refuses several servers without WithEnsembleTiming,
// and a session to one server that /zookeeper/config shows is a member of an
// ensemble fails its first request, naming WithEnsembleTiming; a standalone
// server needs no timing.
func withoutEnsembleTiming() Option {
	return Option{func(o *options) { o.undeclared = true }}
}

func init() { zkhook.WithoutEnsembleTiming = func() any { return withoutEnsembleTiming() } }

// sessionTimeout is the session timeout asked for a TTL: the TTL, or with
// the ensemble's timing declared, long enough that the leader keeps the
// session past every lease counted from a cut-off follower's answers. Such a
// follower answers for up to S = syncLimit × tickTime after its last report
// to the leader, and that report, sent at most a tick (a ping interval, and
// the leader's expiry rounding) after the activity it carries, may carry
// activity up to P older still: P ≤ the TTL (a lease not extended for a TTL
// is lost) and P ≤ a third of the session timeout (go-zookeeper pings an
// idle session that often). A lease counted from a read answered at s ends
// by s + TTL; the leader expires the session no sooner than
// s − S − tick − P + timeout. timeout = 2 × TTL + 3/2 × (S + tick) meets
// both bounds on P.
//
// The lag is rounded up to whole milliseconds: go-zookeeper sends the
// timeout in whole milliseconds, and a grant of less than asked fails.
func (o *options) sessionTimeout(ttl time.Duration) time.Duration {
	if !o.timingSet {
		return ttl
	}
	lag := 3 * (time.Duration(o.syncLimit)*o.tick + o.tick) / 2
	return 2*ttl + (lag + time.Millisecond - 1).Truncate(time.Millisecond)
}

// ttlBounds are the TTLs whose session timeout lies within the declared
// session timeout bounds, in whole milliseconds.
func (o *options) ttlBounds() (lo, hi time.Duration) {
	if !o.timingSet {
		return o.minSession, o.maxSession
	}
	lag := o.sessionTimeout(0)
	lo = max((o.minSession-lag+1)/2, time.Millisecond).Round(time.Millisecond)
	for o.sessionTimeout(lo) < o.minSession {
		lo += time.Millisecond
	}
	hi = ((o.maxSession - lag) / 2).Truncate(time.Millisecond)
	return lo, hi
}

// newOptions applies opts over the defaults.
func newOptions(opts ...Option) options {
	o := options{root: defaultRoot}
	for _, opt := range opts {
		if opt.set != nil {
			opt.set(&o)
		}
	}
	if !o.sessionsSet {
		// ZooKeeper's own defaults: 2 and 20 ticks, of the declared tick
		// or of its default 2s.
		tick := defaultTick
		if o.tick > 0 && o.tick <= time.Hour { // else check refuses it
			tick = o.tick
		}
		o.minSession, o.maxSession = 2*tick, 20*tick
	}
	return o
}

// New is the ZooKeeper backend for lockkit.New over the ensemble's servers
// ("host:port"). A chroot may follow the last server, as in ZooKeeper's own
// connection strings ("zk1:2181,zk2:2181/app", or as the last element
// "zk3:2181/app"): every node then lives below it. Client.Close closes the
// backend's sessions, which frees the locks they still hold.
func New(servers []string, opts ...Option) driver.Spec {
	o := newOptions(opts...)
	spec := driver.Spec{Name: "zookeeper"}
	hosts, chroot, err := parseServers(servers)
	if err == nil {
		err = o.check()
	}
	if err == nil && len(hosts) > 1 && !o.timingSet && !o.undeclared {
		err = fmt.Errorf("%d servers (an ensemble) and no zookeeper.WithEnsembleTiming(tickTime, syncLimit): an ensemble's leader expires a session from what its followers report, so a follower that fails right after answering a renewal can free the lock while the lease is valid; declare zoo.cfg's tickTime and syncLimit with zookeeper.WithEnsembleTiming", len(hosts))
	}
	if err != nil {
		spec.Err = fmt.Errorf("lockkit: zookeeper.New: %w", err)
		return spec
	}
	spec.Open = func(cfg driver.Config) (driver.Backend, error) {
		return newBackend(hosts, chroot, o, cfg), nil
	}
	return spec
}

// parseServers splits a ZooKeeper connection string, given whole or as a
// list, into its hosts and its chroot ("" when none).
func parseServers(servers []string) (hosts []string, chroot string, err error) {
	joined := strings.Join(servers, ",")
	if i := strings.IndexByte(joined, '/'); i >= 0 {
		joined, chroot = joined[:i], joined[i:]
		// A comma in the chroot is a host after it (["zk1:2181/app",
		// "zk2:2181"]): ZooKeeper would take "/app,zk2:2181" for the chroot
		// and drop the host.
		if strings.Contains(chroot, ",") || chroot != cleanPath(chroot) {
			return nil, "", fmt.Errorf("bad chroot %q in the servers: it must be one absolute path, without a trailing or doubled slash, after the last host (\"zk1:2181,zk2:2181/app\")", chroot)
		}
		if chroot == "/" {
			chroot = ""
		}
	}
	for h := range strings.SplitSeq(joined, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, "", errors.New("no servers (want \"host:port\", such as \"127.0.0.1:2181\")")
	}
	return hosts, chroot, nil
}

// cleanPath is p when p is a valid absolute ZooKeeper path, else "".
func cleanPath(p string) string {
	if p == "/" {
		return p
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") {
		return ""
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return ""
		}
	}
	// ZooKeeper refuses a path holding a control character (or a byte
	// that is not UTF-8): refuse it here, not at the first acquire.
	if !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl) {
		return ""
	}
	return p
}

func (o *options) check() error {
	if o.root != "/" && cleanPath(o.root) == "" {
		return fmt.Errorf("WithRoot(%q): want an absolute path without a trailing slash, such as %q", o.root, defaultRoot)
	}
	if o.root == "/" {
		o.root = ""
	}
	if (o.user == "") != (o.password == "") || strings.Contains(o.user, ":") {
		return fmt.Errorf("WithDigestAuth(%q, …): want a user without ':' and a password, both non-empty", o.user)
	}
	if o.minSession <= 0 || o.maxSession < o.minSession {
		return fmt.Errorf("WithSessionTimeouts(%v, %v): want 0 < min ≤ max (the server's minSessionTimeout and maxSessionTimeout)", o.minSession, o.maxSession)
	}
	if o.timingSet && o.undeclared {
		return errors.New("WithEnsembleTiming and the test-only undeclared timing together: give one")
	}
	if o.timingSet {
		if o.syncLimit <= 0 || o.tick < time.Millisecond || o.tick%time.Millisecond != 0 || o.tick > time.Hour || o.syncLimit > 1<<20 {
			return fmt.Errorf("WithEnsembleTiming(%v, %d): want the servers' tickTime (whole milliseconds) and syncLimit (ticks, at least 1), such as 2s and 5", o.tick, o.syncLimit)
		}
		if lo, hi := o.ttlBounds(); hi < lo || hi < 10*time.Millisecond {
			return fmt.Errorf("WithEnsembleTiming(%v, %d): the session timeout a TTL needs (2 × TTL + %v) leaves no TTL within the session timeout bounds %v–%v; raise maxSessionTimeout on the servers and declare it with zookeeper.WithSessionTimeouts", o.tick, o.syncLimit, o.sessionTimeout(0), o.minSession, o.maxSession)
		}
	}
	return nil
}

// backend is the driver.Backend: its sessions, one per TTL, and the
// acquisitions it made on them.
type backend struct {
	hosts      []string
	base       string // chroot + root: the parent of every lock's node
	o          options
	name       string
	cmdTimeout time.Duration
	acl        []zk.ACL // of lock nodes and their parents
	baseACL    []zk.ACL // of the chroot and root nodes the backend creates

	// timingChecked: a session found its server standalone
	// (/zookeeper/config names at most one server; checkEnsemble), or
	// there is nothing to check (WithEnsembleTiming, withoutEnsembleTiming).
	timingChecked atomic.Bool

	mu       sync.Mutex
	sessions map[time.Duration]*session
	acqs     map[acqKey]*acq
	closed   bool
}

type acqKey struct{ key, token string }

func newBackend(hosts []string, chroot string, o options, cfg driver.Config) *backend {
	b := &backend{
		hosts: hosts, base: chroot + o.root, o: o, cmdTimeout: cfg.CommandTimeout,
		name:     "zookeeper(" + strings.Join(hosts, ",") + chroot + ")",
		sessions: map[time.Duration]*session{}, acqs: map[acqKey]*acq{},
		acl: zk.WorldACL(zk.PermAll), baseACL: zk.WorldACL(zk.PermAll),
	}
	if b.cmdTimeout <= 0 {
		b.cmdTimeout = 2 * time.Second
	}
	b.timingChecked.Store(o.timingSet || o.undeclared)
	if o.user != "" {
		b.acl = append(zk.DigestACL(zk.PermAll, o.user, o.password), zk.WorldACL(zk.PermRead)...)
	}
	return b
}

// Capabilities: TTLs between the declared session timeout bounds, fences
// (Czxid), a FIFO queue, and a holder read (elections).
func (b *backend) Capabilities() driver.Capabilities {
	minTTL, maxTTL := b.o.ttlBounds()
	return driver.Capabilities{
		Name:   b.name,
		MinTTL: minTTL, MaxTTL: maxTTL, TTLGranularity: time.Millisecond,
		Fences: true, FairQueue: true, Holders: true,
	}
}

// CheckTTL refuses a TTL the ensemble cannot keep as a session timeout. The
// Client calls it when a domain is declared: a TTL it accepts has its session
// dialled then, in the background, so that the domain's first acquire does not
// spend its command timeout on the handshake.
func (b *backend) CheckTTL(ttl time.Duration) error {
	if err := b.ttlError(ttl); err != nil {
		return err
	}
	_, _ = b.session(ttl) // connects in the background; an error comes back at the acquire
	return nil
}

func (b *backend) ttlError(ttl time.Duration) error {
	if b.o.timingSet {
		lo, hi := b.o.ttlBounds()
		if ttl < lo || ttl > hi {
			return fmt.Errorf("ttl %v needs a session timeout of %v (2 × ttl + %v, for the ensemble timing declared with zookeeper.WithEnsembleTiming), outside the ZooKeeper ensemble's session timeout bounds %v–%v: use a ttl between %v and %v, or widen minSessionTimeout/maxSessionTimeout on the servers and declare them with zookeeper.WithSessionTimeouts", ttl, b.o.sessionTimeout(ttl), b.o.sessionTimeout(0), b.o.minSession, b.o.maxSession, lo, hi)
		}
		return nil
	}
	switch {
	case ttl < b.o.minSession:
		return fmt.Errorf("ttl %v is below the ZooKeeper ensemble's minSessionTimeout %v (2 ticks unless set): the lease is the session, and the server would stretch it; raise the ttl to at least %v, or lower tickTime/minSessionTimeout on the servers and declare it with zookeeper.WithSessionTimeouts", ttl, b.o.minSession, b.o.minSession)
	case ttl > b.o.maxSession:
		return fmt.Errorf("ttl %v is above the ZooKeeper ensemble's maxSessionTimeout %v (20 ticks unless set): the server would cut the session short of the lease; lower the ttl to at most %v, or raise maxSessionTimeout on the servers and declare it with zookeeper.WithSessionTimeouts", ttl, b.o.maxSession, b.o.maxSession)
	}
	return nil
}

// session is the backend's session for ttl, made on first use.
func (b *backend) session(ttl time.Duration) (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("zookeeper: the backend is closed")
	}
	if s := b.sessions[ttl]; s != nil {
		return s, nil
	}
	if err := b.ttlError(ttl); err != nil {
		return nil, fmt.Errorf("zookeeper: %w: %w", err, driver.ErrFinal)
	}
	s, err := b.dial(ttl)
	if err != nil {
		return nil, err
	}
	b.sessions[ttl] = s
	return s, nil
}

// Ping reads the root on the backend's read session (readSession).
func (b *backend) Ping(ctx context.Context) error {
	s, err := b.readSession(ctx)
	if err != nil {
		return err
	}
	_, err = call(ctx, func() (bool, error) {
		ok, _, err := s.conn.Exists("/")
		return ok, err
	})
	return classify(err)
}

// readSession is the session for requests of no lease (Ping, ReadHolder),
// established: the longest-TTL one the backend has (the steadiest:
// go-zookeeper drops a connection silent for 2/3 of its timeout), or,
// before any, one of its own with a 10s timeout (within the declared
// bounds).
func (b *backend) readSession(ctx context.Context) (*session, error) {
	b.mu.Lock()
	var s *session
	for _, c := range b.sessions {
		if s == nil || c.ttl > s.ttl {
			s = c
		}
	}
	b.mu.Unlock()
	if s == nil {
		var err error
		lo, hi := b.o.ttlBounds()
		if s, err = b.session(min(max(10*time.Second, lo), hi)); err != nil {
			return nil, err
		}
	}
	if _, err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// ReadHolder reads who holds key: the lowest sequence under the lock's
// path, after a sync (so that the server answering has seen every write
// committed before the read was sent). Its name carries the holder's token,
// its data is the holder's description, and its Czxid is the fence (an
// election's term). A node deleted between the listing and its read (a
// release, an expired session) is read again from a fresh listing.
func (b *backend) ReadHolder(ctx context.Context, key string) (driver.Holding, bool, error) {
	parent, err := b.nodePath(key)
	if err != nil {
		return driver.Holding{}, false, err
	}
	s, err := b.readSession(ctx)
	if err != nil {
		return driver.Holding{}, false, classify(err)
	}
	for range 3 {
		if _, err := call(ctx, func() (string, error) { return s.conn.Sync(parent) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return driver.Holding{}, false, classify(err)
		}
		children, err := call(ctx, func() ([]string, error) {
			c, _, err := s.conn.Children(parent)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Holding{}, false, nil
		}
		if err != nil {
			return driver.Holding{}, false, classify(err)
		}
		lowest := lowestNode(children)
		if lowest == "" {
			return driver.Holding{}, false, nil
		}
		type node struct {
			data []byte
			stat *zk.Stat
		}
		n, err := call(ctx, func() (node, error) {
			data, stat, err := s.conn.Get(parent + "/" + lowest)
			return node{data, stat}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return driver.Holding{}, false, classify(err)
		}
		return driver.Holding{Token: tokenOf(lowest), Holder: string(n.data), Fence: n.stat.Czxid}, true, nil
	}
	return driver.Holding{}, false, driver.Failure(fmt.Errorf("zookeeper: %s: its lowest node vanished under three reads in a row", key))
}

// Close closes every session: the server deletes their nodes at once,
// which frees the locks they still hold. The sessions close in parallel:
// go-zookeeper's Close waits up to a second for the server's answer, so a
// stalled server would otherwise cost a second per session (per TTL).
func (b *backend) Close() error {
	b.mu.Lock()
	ss := b.sessions
	b.sessions, b.closed = map[time.Duration]*session{}, true
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(s.close)
	}
	wg.Wait()
	return nil
}

// call runs f, a blocking go-zookeeper request, bounded by ctx. A request
// that outlives ctx finishes on its own; callers that may create state make
// sure a late success is undone (acq.create).
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("zookeeper: no answer: %w", context.Cause(ctx))
	}
}

// classify marks the errors that mean the ensemble cannot serve now (no
// connection, no quorum, a session being moved or closed) as failures, for
// the Client's breaker.
func classify(err error) error {
	switch {
	case err == nil, errors.Is(err, driver.ErrContended), errors.Is(err, driver.ErrFailure), errors.Is(err, driver.ErrFinal):
		return err
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrClosing),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrSessionMoved),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNotConnected):
		return driver.Failure(err)
	case isFinal(err):
		return fmt.Errorf("%w: %w", err, driver.ErrFinal)
	}
	return err
}

// isFinal: the server refused the request for good; the same request can
// never succeed.
func isFinal(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || errors.Is(err, zk.ErrInvalidACL) || errors.Is(err, zk.ErrBadArguments)
}
