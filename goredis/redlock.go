package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockkit/lockkit/internal/obs"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// errRedlockFencing refuses fencing domains on a Redlock client. Redlock
// cannot issue a fencing number worth the name: each node keeps its own
// counter, two successive majorities may overlap in a single node, and that
// node may have restarted with its counter lost or lagging; the largest (or
// any) number read from one majority is then not guaranteed to exceed the one
// issued to the previous holder. A fence that can go backwards would let the
// protected resource accept a stale writer, so lockkit issues none.
var errRedlockFencing = errors.New("fencing is not available on a Redlock client: " +
	"every node keeps its own counter, and a number read from one majority is not guaranteed " +
	"to exceed the number the previous holder got from another (the majorities may share a " +
	"single node, which may have restarted with its counter lost); turn fencing off for this " +
	"domain, or serve it from a single primary (with Sentinel and replicas: WAIT) or a Cluster")

// newRedlockBackend makes the Redlock backend over nodes. Each node gets its own single-node backend, with its own breaker.
func newRedlockBackend(nodes []redis.UniversalClient, cfg driver.Config) (*redlockBackend, error) {
	cmdTimeout := cfg.CommandTimeout
	n := len(nodes)
	switch {
	case n < 3:
		return nil, fmt.Errorf("lockkit: Redlock needs at least 3 independent nodes, got %d", n)
	case n%2 == 0:
		return nil, fmt.Errorf("lockkit: Redlock needs an odd number of nodes, got %d: a majority of %d is %d, which tolerates no more failed nodes than %d would; add or remove one", n, n, n/2+1, n-1)
	}
	b := &redlockBackend{quorum: n/2 + 1, cmdTimeout: cmdTimeout, workers: newWorkerPool(), quit: make(chan struct{})}
	seen := make(map[string]int, n)
	for i, rdb := range nodes {
		if rdb == nil {
			return nil, fmt.Errorf("lockkit: Redlock: node %d is a nil client", i)
		}
		for j := range i {
			if nodes[j] == rdb {
				return nil, fmt.Errorf("lockkit: Redlock: nodes %d and %d are the same client; Redlock needs independent nodes", j, i)
			}
		}
		name := nodeName(rdb)
		if c, ok := rdb.(*redis.Client); ok && name != "FailoverClient" {
			for _, id := range endpoints(c.Options().Network, name) {
				if j, dup := seen[id]; dup && j != i {
					return nil, fmt.Errorf("lockkit: Redlock: nodes %d and %d both point at %s (%s); Redlock needs independent nodes", j, i, id, name)
				}
				seen[id] = i
			}
		}
		b.nodes = append(b.nodes, redlockNode{name: name, index: i, be: cfg.Guard(name, newRedlockMember(rdb, cmdTimeout))})
	}
	return b, nil
}

// newRedlockMember is the single-node backend of one Redlock node, whose
// acquire is its vote (redisBackend.vote).
func newRedlockMember(rdb redis.UniversalClient, cmdTimeout time.Duration) driver.Backend {
	be := newRedisBackend(rdb, cmdTimeout)
	switch m := be.(type) {
	case *redisBackend:
		m.redlock = true
	case clusterBackend:
		m.redlock = true
	}
	return be
}

// quarantinedError is a node's refusal to vote: it restarted, or lost its
// data, less than the key's TTL ago, and may have forgotten a lease that it
// helped grant, which may still be valid (docs/semantics.md, guarantee 1).
// It is no failure of the node: its breaker does not count it.
type quarantinedError struct{ left time.Duration }

func (e *quarantinedError) Error() string {
	return "quarantined after a restart or a loss of its data: votes for a key of this TTL again in " + e.left.String()
}

// endpoints names where addr leads, so that one server reached under two
// names (localhost:6379 and 127.0.0.1:6379) is seen as one node: the
// addresses its host resolves to, with the port; addr itself when it does not
// resolve within a second (the check then compares names).
func endpoints(network, addr string) []string {
	if network == "" {
		network = "tcp"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || network == "unix" {
		return []string{network + "/" + addr}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil || len(ips) == 0 {
		return []string{network + "/" + addr}
	}
	out := make([]string, len(ips))
	for k, ip := range ips {
		out[k] = "tcp/" + net.JoinHostPort(ip, port)
	}
	return out
}

func nodeName(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "cluster(" + strings.Join(c.Options().Addrs, ",") + ")"
	}
	return fmt.Sprintf("%T", rdb)
}

// redlockBackend runs every operation on all of its nodes in parallel and
// decides by majority. See Redlock for the rules.
type redlockBackend struct {
	nodes      []redlockNode
	quorum     int
	cmdTimeout time.Duration

	// pending holds the acquisitions that were granted while some nodes had
	// not answered yet, by token, until those answers arrive. A release of
	// such a lease marks it abandoned so that a node whose acquire lands
	// after the release deletes the key again at once, instead of keeping it
	// until its TTL.
	pending sync.Map // token -> *redlockRound

	// work counts, by key, what may still leave a key on a node after the
	// call that started it returned: a round's node commands still out, and
	// the give-backs (giveBack) they started. GivingBack waits for it.
	work keyCount
	// maxTTL is the longest TTL an acquire or extend has asked for: how long
	// a key whose release failed can live on at most (Release is not told
	// its lease's TTL).
	maxTTL atomic.Int64
	// quit is closed by Close: the give-backs still going stop (the Client
	// named their keys: GivingBack).
	quit     chan struct{}
	quitOnce sync.Once

	workers workerPool
}

// redlockNode is one member: a single-node Redis backend behind its own
// breaker, which the Client put there (driver.Config.Guard).
type redlockNode struct {
	name  string
	index int // in redlockBackend.nodes
	be    driver.Backend
}

var (
	_ driver.Backend = (*redlockBackend)(nil)
)

// redlockSpec is the Redlock backend over nodes.
func redlockSpec(nodes []redis.UniversalClient) driver.Spec {
	for i, n := range nodes {
		if n == nil {
			continue // newRedlockBackend names it: "node i is a nil client"
		}
		if err := checkRedisClient(n); err != nil {
			return driver.Spec{Err: fmt.Errorf("lockkit: Redlock: node %d is not usable: %w", i, err)}
		}
	}
	return driver.Spec{Name: "redlock", Open: func(cfg driver.Config) (driver.Backend, error) {
		return newRedlockBackend(nodes, cfg)
	}}
}

// nodeResult is what one node said in one Redlock operation.
type nodeResult uint8

const (
	// nodePending: no answer yet when the operation was decided.
	nodePending nodeResult = iota
	// nodeOK: acquire took the key; extend or release found and changed it.
	nodeOK
	// nodeHeld: acquire found the key held by another owner; extend or
	// release found it not held by this token.
	nodeHeld
	// nodeRefused: the node's breaker is open; nothing was sent to it.
	nodeRefused
	// nodeFailed: an error (network, timeout, error reply, too few replicas).
	nodeFailed
	// nodeQuarantined: acquire only: the node restarted or lost its data
	// less than the key's TTL ago and refused to vote (quarantinedError).
	nodeQuarantined
)

func (r nodeResult) String() string {
	switch r {
	case nodePending:
		return "pending"
	case nodeOK:
		return "ok"
	case nodeHeld:
		return "held"
	case nodeRefused:
		return "breaker_open"
	case nodeFailed:
		return "failed"
	case nodeQuarantined:
		return "quarantined"
	}
	return "nodeResult(" + strconv.Itoa(int(r)) + ")"
}

// nodeOutcome is one node's part in one Redlock operation: what the acquire
// span reports per node.
type nodeOutcome struct {
	Node    string        // the node's address
	Result  nodeResult    // nodePending when it had not answered in time
	Latency time.Duration // from the fan-out to its answer; 0 when pending
	Err     error         // set for nodeFailed, nodeRefused and nodeQuarantined
}

func (o nodeOutcome) String() string {
	s := o.Node + "=" + o.Result.String()
	if o.Result != nodePending {
		s += "(" + o.Latency.Round(10*time.Microsecond).String() + ")"
	}
	if o.Err != nil {
		s += ": " + o.Err.Error()
	}
	return s
}

// nodeReporter is implemented by backends whose acquisitions span several
// independent nodes: acquireNodes also returns each node's outcome (acquire
// records them on the acquire span). The returned slice is owned by the
// caller and not changed afterwards.
type nodeReporter interface {
	acquireNodes(ctx context.Context, req *driver.Request) (int64, []nodeOutcome, error)
}

var _ nodeReporter = (*redlockBackend)(nil)

// Close stops the idle workers and the give-backs still going (the
// Client's Close has waited for them within its ctx, and named the keys of
// those left: GivingBack).
func (b *redlockBackend) Close() error {
	b.quitOnce.Do(func() { close(b.quit) })
	b.workers.stop()
	return nil
}

// GivingBack waits until no node command or give-back that may leave a key
// held by a released or failed token is still going, or ctx ends, and
// returns the keys of those still going then (nil when none). The Client's
// Close calls it once the leases are released: Close returns only once no
// key is held by the client's tokens, or names the keys still in doubt
// (docs/semantics.md, guarantee 4). A released lease whose acquire had not
// answered on some node, or whose release failed on one, is given back there
// in the background (giveBack), after Release returned.
func (b *redlockBackend) GivingBack(ctx context.Context) []string {
	return b.work.wait(ctx)
}

// keyCount counts work in flight by key, and lets a caller wait for none.
type keyCount struct {
	mu    sync.Mutex
	byKey map[string]int
	total int
	idle  chan struct{} // closed when total drops to 0; nil when nobody waits
}

func (k *keyCount) add(key string) {
	k.mu.Lock()
	if k.byKey == nil {
		k.byKey = make(map[string]int)
	}
	k.byKey[key]++
	k.total++
	k.mu.Unlock()
}

func (k *keyCount) done(key string) {
	k.mu.Lock()
	if k.byKey[key]--; k.byKey[key] <= 0 {
		delete(k.byKey, key)
	}
	if k.total--; k.total == 0 && k.idle != nil {
		close(k.idle)
		k.idle = nil
	}
	k.mu.Unlock()
}

// wait returns once the count is 0 (nil), or when ctx ends with the keys
// still counted.
func (k *keyCount) wait(ctx context.Context) []string {
	k.mu.Lock()
	if k.total == 0 {
		k.mu.Unlock()
		return nil
	}
	if k.idle == nil {
		k.idle = make(chan struct{})
	}
	idle := k.idle
	k.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := make([]string, 0, len(k.byKey))
	for key := range k.byKey {
		keys = append(keys, key)
	}
	return keys
}

// noteTTL records ttl in maxTTL.
func (b *redlockBackend) noteTTL(ttl time.Duration) {
	for {
		m := b.maxTTL.Load()
		if int64(ttl) <= m || b.maxTTL.CompareAndSwap(m, int64(ttl)) {
			return
		}
	}
}

// Capabilities: a quorum whose health stays green with up to N − quorum
// node breakers open (locks are still granted while a majority's breakers
// are closed); no fences (see errRedlockFencing), no queue, no batching.
func (b *redlockBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Name: "redlock", MinTTL: time.Millisecond, TTLGranularity: time.Millisecond,
		NoFences: errRedlockFencing.Error(),
		Quorum:   true, Tolerated: len(b.nodes) - b.quorum,
	}
}

// acquire is one attempt; each node's outcome becomes a
// lockkit.redlock.node event on the acquire span in ctx.
func (b *redlockBackend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	_, nodes, err := b.acquireNodes(ctx, req)
	for _, o := range nodes {
		obs.RedlockNode(ctx, o.Node, o.Result.String(), o.Latency, o.Err)
	}
	return 0, err
}

// acquireNodes is one Redlock acquisition attempt.
//
// The outcome, from the node answers counted when it was decided (ok =
// took the key, held = held by another owner, the rest failed, refused by
// their breaker, quarantined or not answered yet; a quarantined node
// restarted or lost its data less than the key's TTL ago, and cannot say
// whether it helped grant the key to a lease still valid):
//
//   - ok ≥ majority: granted. The validity check (ttl − elapsed − drift > 0)
//     is the acquire loop's, on its clock, with elapsed running from before
//     this call to its return, so it includes the slowest node needed for
//     the majority.
//   - ok < majority, ok + held ≥ majority: driver.ErrContended (ErrNotAcquired).
//     A majority answered and the lock is held on enough of them that no
//     majority was free.
//   - ok + held < majority: fewer than a majority answered, so nothing can be
//     said about the lock: a backend failure (ErrUnavailable). The error
//     matches breaker.ErrOpen only when the open breakers alone leave too
//     few nodes for a majority, so that the acquire loop fails fast then.
//
// The attempt is decided as soon as the outcome cannot change, without
// waiting for slow nodes. Every failed attempt is released on the nodes that
// may have taken the key: at once on those that answered, and by the node's
// own goroutine when its answer arrives for those that had not.
func (b *redlockBackend) acquireNodes(ctx context.Context, p *driver.Request) (int64, []nodeOutcome, error) {
	key, token := p.Key, p.Token
	if p.Fencing {
		return 0, nil, errRedlockFencing // Client.Domain refuses it first
	}
	b.noteTTL(p.TTL)
	r := b.newRound(key, token)
	r.all = make(chan struct{})
	r.until = r.start.Add(p.TTL)
	// Counted until every node's command, and the give-back it may start,
	// has ended (acquireOn).
	b.work.add(key)
	r.running.Store(int32(len(b.nodes)))
	for i := range b.nodes {
		b.workers.do(func() { r.acquireOn(ctx, i, p) })
	}
	<-r.settled
	// Give the nodes still out as long again as the decision took: healthy
	// nodes answer within that, and an attempt that heard from every node
	// is released on all of them before it returns (no key lingers on a
	// straggler for the next acquirer to trip on). A hung node costs at most
	// this doubling, until its breaker opens.
	select {
	case <-r.all:
	default:
		grace := time.NewTimer(time.Since(r.start))
		select {
		case <-r.all:
		case <-grace.C:
		}
		grace.Stop()
	}
	r.mu.Lock()
	r.closed = true
	ok, held, left := r.ok, r.held, r.left
	granted := ok >= b.quorum
	if granted {
		if left > 0 {
			r.registered = true
			b.pending.Store(token, r)
		}
	} else {
		r.abandoned = true // nodes that answer from now on release themselves
	}
	r.mu.Unlock()
	nodes := r.answers
	if granted {
		return 0, nodes, nil
	}
	b.releaseAnswered(ctx, key, token, r.until, nodes)
	if ok+held >= b.quorum {
		return 0, nodes, driver.ErrContended
	}
	return 0, nodes, b.failure("acquire", nodes)
}

// releaseAnswered releases a failed attempt on the nodes that answered and
// may hold the key: it waits for the first release on those that took it
// (they answer, and a quick retry must not find its own stale key there) and
// not for those that failed (their release may take the whole command
// timeout). Each is a give-back: repeated until the node confirms.
func (b *redlockBackend) releaseAnswered(ctx context.Context, key, token string, until time.Time, nodes []nodeOutcome) {
	var wg sync.WaitGroup
	for i, o := range nodes {
		switch o.Result {
		case nodeOK:
			wg.Add(1)
			b.work.add(key)
			b.workers.do(func() {
				defer b.work.done(key)
				b.giveBack(ctx, i, key, token, until, wg.Done)
			})
		case nodeFailed:
			if nodeGone(o.Err) {
				continue
			}
			b.work.add(key)
			b.workers.do(func() {
				defer b.work.done(key)
				b.giveBack(ctx, i, key, token, until, nil)
			})
		}
	}
	wg.Wait()
}

// releaseOn is one owner-checked release on node i, bounded by the command
// timeout and independent of ctx's end.
func (b *redlockBackend) releaseOn(ctx context.Context, i int, key, token string) (bool, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cmdTimeout)
	defer cancel()
	return b.nodes[i].be.Release(rctx, key, token)
}

// giveBack gives token's key back on node i, whose acquire's outcome is
// unknown (its reply was lost or came too late) or whose release failed,
// for a token that holds no lease: one release is not enough, as a node
// that stalled (SIGSTOP, a long fork) answers neither the acquire nor the
// release, and runs the acquire when it wakes, after the release timed
// out. So the owner-checked release is repeated, with backoff, until it
// removes the key, or twice answers that the token holds nothing (the
// second at least a command timeout after the first, so that an acquire
// still on its way is caught), or until has passed (the TTL since the
// acquire's send: the key is gone by then anyway), or the backend is
// closed. Releases pass the node's breaker (the Client guards only
// acquisitions), so an open breaker does not stop it. first, when set, is
// called after the first release. The caller counts it in b.work.
func (b *redlockBackend) giveBack(ctx context.Context, i int, key, token string, until time.Time, first func()) {
	wait, misses := b.cmdTimeout/2, 0
	for {
		held, err := b.releaseOn(ctx, i, key, token)
		if first != nil {
			first()
			first = nil
		}
		switch {
		case err == nil && held:
			return
		case err == nil:
			if misses++; misses == 2 {
				return
			}
			wait = max(wait, b.cmdTimeout)
		case nodeGone(err):
			return
		}
		if time.Now().Add(wait).After(until) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-b.quit:
			t.Stop()
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// nodeGone reports whether err says that nothing can reach the node, so
// that it holds nothing to give back: its client was closed, or no server
// runs there (the node is down, and what it held in memory with it; one
// restarted from its files is quarantined for a TTL, by when the key has
// expired).
func nodeGone(err error) bool {
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED)
}

func (b *redlockBackend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	b.noteTTL(ttl)
	return b.majority(ctx, "extend", nil, func(ctx context.Context, n *redlockNode) (bool, error) {
		return n.be.Extend(ctx, key, token, ttl)
	})
}

// release deletes the lease on every node. A node whose acquire has not
// answered yet is not sent a release that could overtake it: the lease is
// marked abandoned, and that node's acquire gives the key back as soon as
// it answers (giveBack). A node whose release fails is given the key back
// the same way, after Release returned.
func (b *redlockBackend) Release(ctx context.Context, key, token string) (bool, error) {
	var skip []bool
	sent := len(b.nodes)
	if v, ok := b.pending.LoadAndDelete(token); ok {
		r := v.(*redlockRound)
		r.mu.Lock()
		r.abandoned = true
		skip = make([]bool, len(r.got))
		for i, got := range r.got {
			if skip[i] = !got; skip[i] {
				sent--
			}
		}
		r.mu.Unlock()
	}
	// Counted until every node's release has ended (majority returns
	// before), and a failed one's give-back has started.
	until := time.Now().Add(time.Duration(b.maxTTL.Load()))
	b.work.add(key)
	left := new(atomic.Int32)
	left.Store(int32(sent))
	if sent == 0 {
		b.work.done(key)
	}
	return b.majority(ctx, "release", skip, func(ctx context.Context, n *redlockNode) (bool, error) {
		held, err := n.be.Release(ctx, key, token)
		if err != nil && !nodeGone(err) {
			i := n.index
			b.work.add(key)
			b.workers.do(func() {
				defer b.work.done(key)
				t := time.NewTimer(b.cmdTimeout / 2)
				select {
				case <-t.C:
					b.giveBack(ctx, i, key, token, until, nil)
				case <-b.quit:
					t.Stop()
				}
			})
		}
		if left.Add(-1) == 0 {
			b.work.done(key)
		}
		return held, err
	})
}

// ping succeeds when a majority of nodes answer.
func (b *redlockBackend) Ping(ctx context.Context) error {
	_, err := b.majority(ctx, "ping", nil, func(ctx context.Context, n *redlockNode) (bool, error) {
		return true, n.be.Ping(ctx)
	})
	return err
}

// majority runs op on every node but those in skip, in parallel. It returns
// (true, nil) once a majority said yes; (false, nil) once a majority
// answered and too few of them said yes (the lease is not held); and an
// error when no majority answered. It does not wait for the remaining nodes
// once that is settled: they finish on their own, within the command
// timeout, so a release still reaches a slow node. Skipped nodes count as
// not answering.
func (b *redlockBackend) majority(ctx context.Context, what string, skip []bool, op func(context.Context, *redlockNode) (bool, error)) (bool, error) {
	r := b.newRound("", "")
	// The nodes' commands outlive the caller's ctx (a release must still reach
	// a slow node after the majority answered; and a command cut off midway
	// costs its connection), bounded by the command timeout.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cmdTimeout)
	r.cancel = cancel
	r.mu.Lock()
	for i := range skip {
		if skip[i] {
			r.left--
		}
	}
	if r.left == 0 || r.decided() {
		// Not reached: a release skips only the nodes a granted acquisition
		// had not heard from, at most N - majority.
		r.signalled = true
		close(r.settled)
		if r.left == 0 {
			cancel()
		}
	}
	r.mu.Unlock()
	for i := range b.nodes {
		if i < len(skip) && skip[i] {
			continue
		}
		b.workers.do(func() { r.run(nctx, i, op) })
	}
	select {
	case <-r.settled:
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.closed = true
	ok, no := r.ok, r.held
	// Each node's outcome so far, for the error when the caller's ctx ended
	// first (the nodes not yet answered are pending).
	answers := append([]nodeOutcome(nil), r.answers...)
	r.mu.Unlock()
	switch {
	case ok >= b.quorum:
		return true, nil
	case ok+no >= b.quorum:
		return false, nil
	case ctx.Err() != nil:
		return false, fmt.Errorf("lockkit: %w: %w", ctx.Err(), b.failure(what, answers))
	}
	return false, b.failure(what, r.answers)
}

// failure is the error of an operation that no majority answered.
func (b *redlockBackend) failure(what string, nodes []nodeOutcome) error {
	refused := 0
	for _, o := range nodes {
		if o.Result == nodeRefused {
			refused++
		}
	}
	return &redlockError{op: what, quorum: b.quorum, nodes: nodes, open: len(nodes)-refused < b.quorum}
}

// redlockRound is one operation's fan-out: the node goroutines record their
// answers here, and the caller waits on settled.
type redlockRound struct {
	b          *redlockBackend
	key, token string // acquisitions only
	settled    chan struct{}
	all        chan struct{} // acquisitions: closed once every node answered
	answers    []nodeOutcome
	got        []bool // node i answered, counted or late
	start      time.Time
	until      time.Time          // acquisitions: start + TTL, when the key is gone anyway
	cancel     context.CancelFunc // called by the last node to answer; may be nil
	running    atomic.Int32       // acquisitions: node commands (and their give-backs) not ended

	mu         sync.Mutex
	ok, held   int
	left       int  // nodes that have not answered
	signalled  bool // settled is closed
	closed     bool // the caller decided: later answers are not counted
	abandoned  bool // acquisitions: failed or released; later takers release
	registered bool // acquisitions: in b.pending until the last answer
}

func (b *redlockBackend) newRound(key, token string) *redlockRound {
	r := &redlockRound{
		b:       b,
		key:     key,
		token:   token,
		settled: make(chan struct{}),
		answers: make([]nodeOutcome, len(b.nodes)),
		got:     make([]bool, len(b.nodes)),
		start:   time.Now(),
		left:    len(b.nodes),
	}
	for i := range r.answers {
		r.answers[i].Node = b.nodes[i].name
	}
	return r
}

// acquireOn runs the acquisition on node i, through its breaker.
func (r *redlockRound) acquireOn(ctx context.Context, i int, p *driver.Request) {
	_, err := r.b.nodes[i].be.Acquire(ctx, p)
	res := nodeOK
	switch {
	case err == nil:
	case errors.Is(err, driver.ErrContended):
		res, err = nodeHeld, nil
	case errors.Is(err, breaker.ErrOpen):
		res = nodeRefused
	case errors.As(err, new(*quarantinedError)):
		res = nodeQuarantined // took nothing: no release
	default:
		res = nodeFailed
	}
	late, abandoned := r.record(i, res, err)
	if late && abandoned && (res == nodeOK || res == nodeFailed && !nodeGone(err)) {
		r.b.giveBack(ctx, i, r.key, r.token, r.until, nil)
	}
	if r.running.Add(-1) == 0 {
		r.b.work.done(r.key)
	}
}

// run runs op on node i.
func (r *redlockRound) run(ctx context.Context, i int, op func(context.Context, *redlockNode) (bool, error)) {
	yes, err := op(ctx, &r.b.nodes[i])
	res := nodeOK
	switch {
	case err != nil:
		res = nodeFailed
	case !yes:
		res = nodeHeld
	}
	r.record(i, res, err)
}

// record counts node i's answer, unless the caller has decided already
// (late). It closes settled once the outcome can no longer change.
func (r *redlockRound) record(i int, res nodeResult, err error) (late, abandoned bool) {
	lat := time.Since(r.start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[i] = true
	r.left--
	if r.left == 0 {
		if r.cancel != nil {
			r.cancel()
		}
		if r.all != nil {
			close(r.all)
		}
		if r.registered {
			r.b.pending.CompareAndDelete(r.token, r)
		}
	}
	if r.closed {
		return true, r.abandoned
	}
	r.answers[i] = nodeOutcome{Node: r.b.nodes[i].name, Result: res, Latency: lat, Err: err}
	switch res {
	case nodeOK:
		r.ok++
	case nodeHeld:
		r.held++
	}
	if !r.signalled && r.decided() {
		r.signalled = true
		close(r.settled)
	}
	return false, false
}

// decided reports whether the answers so far fix the outcome: granted (a
// majority said yes), not held (a majority answered, no majority of yes is
// possible), or failed (not even with every remaining node could a majority
// answer). r.mu is held.
func (r *redlockRound) decided() bool {
	q := r.b.quorum
	switch {
	case r.ok >= q, r.left == 0:
		return true
	case r.ok+r.left >= q:
		return false // a majority of yes is still possible
	}
	return r.ok+r.held >= q || r.ok+r.held+r.left < q
}

// redlockError is a Redlock operation that fewer than a majority of nodes
// answered. It says what each node did, and unwraps to the nodes' errors;
// to breaker.ErrOpen only when the open breakers alone left too few nodes
// for a majority.
type redlockError struct {
	op     string
	quorum int
	nodes  []nodeOutcome
	open   bool
}

func (e *redlockError) Error() string {
	var sb strings.Builder
	answered := 0
	for _, o := range e.nodes {
		if o.Result == nodeOK || o.Result == nodeHeld {
			answered++
		}
	}
	fmt.Fprintf(&sb, "redlock %s: no majority: %d of %d nodes answered, %d needed", e.op, answered, len(e.nodes), e.quorum)
	if q := quarantined(e.nodes); q > 0 {
		fmt.Fprintf(&sb, " (%d quarantined after a restart or a loss of data)", q)
	}
	for _, o := range e.nodes {
		sb.WriteString("; ")
		sb.WriteString(o.String())
	}
	return sb.String()
}

func quarantined(nodes []nodeOutcome) int {
	n := 0
	for _, o := range nodes {
		if o.Result == nodeQuarantined {
			n++
		}
	}
	return n
}

func (e *redlockError) Unwrap() []error {
	var errs []error
	for _, o := range e.nodes {
		if o.Err != nil && (e.open || o.Result != nodeRefused) {
			errs = append(errs, o.Err)
		}
	}
	return errs
}

// workerPool runs node operations on long-lived goroutines. A fresh goroutine
// per node per operation grows its stack to the depth of a go-redis call
// every time, which was a fifth of the client's CPU time on 5 nodes.
// Workers wait for work for up to workerIdle, then exit.
type workerPool struct {
	tasks chan func()
	quit  chan struct{} // closed by stop: idle workers exit at once
	once  *sync.Once
}

const workerIdle = 10 * time.Second

func newWorkerPool() workerPool {
	return workerPool{tasks: make(chan func()), quit: make(chan struct{}), once: new(sync.Once)}
}

// stop makes idle workers exit now rather than after workerIdle; work handed
// over later still runs, each on a goroutine that exits after it.
func (p workerPool) stop() { p.once.Do(func() { close(p.quit) }) }

// do runs f on an idle worker, or on a new one when none is idle: it never
// waits for a busy worker.
func (p workerPool) do(f func()) {
	select {
	case p.tasks <- f:
	default:
		go p.work(f)
	}
}

func (p workerPool) work(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-p.tasks:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}
