// Package etcd puts lockkit's locks in etcd (v3 API): one key per
// acquisition, bound to a lease of its own, the holder being the key with the
// lowest create revision, and that revision as the fence.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	client, err := lockkit.New(etcd.New(cli))
//
// It lives in its own package so that programs on other backends do not link
// the etcd client, gRPC or protobuf: package lockkit does not import it.
//
// The key layout (docs/wire.md, internal/etcdkey): an acquisition of lock
// key K on lease L writes the etcd key K + "\x00" + "\x01" + L (16 hex
// digits), holding its token (the lease's owner id) and holder description,
// bound to L, a lease granted with the domain's TTL in whole seconds. A lease
// carries one key at a time, and a released lease is kept for the next
// acquisition, so a lock's acquisitions reuse a few names (etcd's index keeps
// every deleted name until a compaction, and a transaction comparing the
// lock's range visits each). The holders and waiters of K are exactly the
// keys in [K+"\x00", K+"\x01"): a lock key never contains a NUL byte (the
// backend refuses one), so no other lock's keys fall in that range, even when
// one lock key is a prefix of another. A key named after its token (earlier
// builds) is read, and excluded, alike. An acquisition whose reply was lost is
// undone by revoking its lease (which deletes the key if it was written),
// never by deleting a key by its name; a name written again is another
// acquisition, with another create revision.
//
// What each operation does:
//
//   - Acquire (wait poll) takes a lease, then in one transaction writes the
//     key only when K has no key at all; otherwise it keeps the lease for a
//     later acquisition and answers contended, leaving no key behind. An
//     attempt on a key the last attempt found held reads first (a
//     linearizable count of K's keys, no write) and answers contended from
//     that, so pollers do not load the cluster with writes.
//   - QueueAcquire (wait fifo) writes the key once per token and keeps it
//     alive while the token waits; the token holds the lock when its key has
//     the lowest create revision, and waits for a push: a watch on the
//     deletion of its predecessor only (the key created just before it), so a
//     release wakes one waiter.
//   - Extend is a keep-alive of this acquisition's own lease followed by a
//     check that its own key still exists with its create revision; Release
//     deletes the key only if its create revision is this acquisition's (a
//     transaction). Neither ever deletes by name: a key written again under
//     the same name has another create revision and stays.
//   - A lease whose key was released is kept (at most 64 per TTL, for half
//     its TTL) for a later acquisition, which sends it a keep-alive instead
//     of a grant: a grant and a revoke are writes through consensus (an
//     fsync on a majority), a keep-alive is not. A lease carries one key at a
//     time, and its TTL counts from the new acquisition's keep-alive, sent
//     together with the put (no round trip of its own); the acquisition is
//     granted only when both succeeded. A spare renewed less than a
//     twentieth of its TTL ago gets no keep-alive: the put alone, and its TTL
//     counts from that earlier renewal's send (driver.Request.TTLFrom).
//     Close revokes them.
//
// Validity is the Client's: it counts a lease from the send of the Acquire or
// Extend that granted or renewed it (for an acquisition on a spare renewed a
// moment earlier, from that renewal's send), and the server counts it from
// when it granted or renewed it, which is later. The backend keeps no session: its
// keep-alives share one LeaseKeepAlive stream (opened at the first, and again
// after it breaks), each sent for one acquire, extend or queue attempt and
// awaited by it within its ctx; nothing counts from an answer's arrival.
//
// Lease TTLs are whole seconds, and the server raises a TTL under its minimum
// (about 1.5 × its election timeout, 2s with etcd's defaults) to that minimum:
// a domain whose TTL is not a whole number of seconds, or is under the minimum
// (WithMinTTL), is refused when it is declared, and a grant the server raised
// anyway (a server with a longer election timeout) is given back and
// reported, never used with a TTL the Client does not know.
//
// A cluster that has lost its quorum cannot grant a lease or write a key: an
// acquire fails (lockkit.ErrUnavailable), and the failures count against the
// Client's circuit breaker.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/etcdkey"
	"github.com/lockkit/lockkit/internal/policy"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// defaultMinTTL is the shortest lease TTL the backend accepts unless told
// otherwise (WithMinTTL): the minimum an etcd server with its default
// election timeout (1s) keeps, ceil(1.5 × 1s).
const defaultMinTTL = 2 * time.Second

// maxTTL is the longest lease TTL etcd grants (its MaxLeaseTTL, 9e9 s).
const maxTTL = 9_000_000_000 * time.Second

// Option tunes the etcd backend.
type Option struct{ set func(*options) }

type options struct {
	minTTL time.Duration
}

// WithMinTTL sets the shortest TTL a domain may have, in whole seconds:
// the server's minimum lease TTL, ceil(1.5 × --election-timeout). Default
// 2s (etcd's default election timeout of 1s). Set it to what
// your cluster keeps: a server with a longer election timeout raises shorter
// TTLs, and such a grant is given back with an error naming its minimum.
func WithMinTTL(d time.Duration) Option { return Option{func(o *options) { o.minTTL = d }} }

// New is the etcd backend over cli, for lockkit.New. The Client never closes
// cli; Client.Close releases the locks it still holds.
func New(cli *clientv3.Client, opts ...Option) driver.Spec {
	o := options{minTTL: defaultMinTTL}
	for _, opt := range opts {
		if opt.set != nil {
			opt.set(&o)
		}
	}
	spec := driver.Spec{Name: "etcd"}
	switch {
	case cli == nil:
		spec.Err = errors.New("lockkit: etcd.New: nil client")
	case cli.Ctx() == nil || cli.KV == nil || cli.Lease == nil || cli.Watcher == nil:
		spec.Err = errors.New("lockkit: etcd.New: the client was not made by clientv3.New")
	case cli.Ctx().Err() != nil:
		// Every call on it would fail with "grpc: the client connection is
		// closing"; say so once, here.
		spec.Err = errors.New("lockkit: etcd.New: the client is closed")
	case o.minTTL < time.Second || o.minTTL%time.Second != 0:
		spec.Err = fmt.Errorf("lockkit: etcd.New: WithMinTTL(%v): etcd counts lease TTLs in whole seconds, at least 1s", o.minTTL)
	default:
		spec.Open = func(cfg driver.Config) (driver.Backend, error) {
			return &backend{
				cli:        cli,
				ka:         newKeeper(cli),
				name:       "etcd(" + strings.Join(cli.Endpoints(), ",") + ")",
				minTTL:     o.minTTL,
				cmdTimeout: cfg.CommandTimeout,
				acqs:       make(map[string]*acq),
				spares:     make(map[int64][]spare),
				contended:  make(map[string]time.Time),
			}, nil
		}
	}
	return spec
}

// acq is what the backend keeps of one acquisition (a token): its key, its
// lease and its key's create revision.
type acq struct {
	key   string // etcdkey.Name(lock key, lease)
	val   string // etcdkey.Value(token, holder)
	lease clientv3.LeaseID
	rev   int64 // 0: not known (the write's reply was lost)
	ttl   int64 // seconds

	// renewed is when the last grant or keep-alive of the lease that
	// succeeded was sent (local time): the server keeps the lease for ttl
	// from a moment after it. Guarded by backend.mu.
	renewed time.Time

	// queued: the predecessor's key, and the revision to watch it from.
	pred     string
	predFrom int64
}

type backend struct {
	cli        *clientv3.Client
	ka         *keeper // the keep-alives' stream
	name       string
	minTTL     time.Duration
	cmdTimeout time.Duration

	mu     sync.Mutex
	acqs   map[string]*acq   // by token
	spares map[int64][]spare // by TTL in seconds
	// contended: when an attempt on a key last found it held (poll mode).
	contended map[string]time.Time
	closed    bool
	bg        sync.WaitGroup // revokes in flight
}

var (
	_ driver.Backend      = (*backend)(nil)
	_ driver.Queue        = (*backend)(nil)
	_ driver.HolderReader = (*backend)(nil)
)

// Capabilities: whole-second TTLs from the server's minimum, create
// revisions as fences, a native FIFO queue, and holder reads.
func (b *backend) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Name:           b.name,
		MinTTL:         b.minTTL,
		TTLGranularity: time.Second,
		MaxTTL:         maxTTL,
		Fences:         true,
		FairQueue:      true,
		Holders:        true,
	}
}

// ReadHolder reads key's acquisition with the lowest create revision (a
// linearizable read): the holder, whose value holds its token and
// description (a token-named key's name holds its token: etcdkey.Parse), and
// whose create revision is its fence.
func (b *backend) ReadHolder(ctx context.Context, key string) (driver.Holding, bool, error) {
	if _, err := b.check(key, b.minTTL); err != nil {
		return driver.Holding{}, false, err
	}
	start, end := etcdkey.Range(key)
	r, err := b.cli.Get(ctx, start, clientv3.WithRange(end),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return driver.Holding{}, false, classify(err)
	}
	if len(r.Kvs) == 0 {
		return driver.Holding{}, false, nil
	}
	kv := r.Kvs[0]
	// A value with no token (not written by lockkit) still holds the lock:
	// held, with its value as the description.
	token, desc, ok := etcdkey.Parse(key, kv.Key, kv.Value)
	if !ok {
		desc = string(kv.Value)
	}
	return driver.Holding{Token: token, Holder: desc, Fence: kv.CreateRevision}, true, nil
}

// check refuses a request the backend cannot serve: a final error.
func (b *backend) check(key string, ttl time.Duration) (int64, error) {
	if key == "" || strings.Contains(key, "\x00") {
		return 0, fmt.Errorf("lockkit: etcd: lock key %q is empty or contains a NUL byte, which ends a lock key in the etcd key layout: %w", key, driver.ErrFinal)
	}
	// The Client refuses such a domain when it is declared (from
	// Capabilities); a request is checked by the same rule.
	if err := policy.CheckStoreTTL(ttl, "etcd", b.minTTL, time.Second, maxTTL); err != nil {
		return 0, fmt.Errorf("lockkit: etcd: %w: %w", err, driver.ErrFinal)
	}
	return int64(ttl / time.Second), nil
}

// grant grants a lease of ttl seconds, refusing one the server raised.
func (b *backend) grant(ctx context.Context, ttl int64) (clientv3.LeaseID, error) {
	g, err := b.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	if g.TTL != ttl {
		b.revokeLater(g.ID)
		return 0, fmt.Errorf("lockkit: etcd: the server granted a lease of %ds for a TTL of %ds: its minimum lease TTL is %ds (1.5 × its election timeout); set the domain's ttl to at least %ds and etcd.WithMinTTL(%ds): %w", g.TTL, ttl, g.TTL, g.TTL, g.TTL, driver.ErrFinal)
	}
	return g.ID, nil
}

// Acquire takes key for req.Token when key has no holder and no waiter.
func (b *backend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	ttl, err := b.check(req.Key, req.TTL)
	if err != nil {
		return 0, err
	}
	if err := checkToken(req); err != nil {
		return 0, err
	}
	if b.wasContended(req.Key) {
		start, end := etcdkey.Range(req.Key)
		// A poller: a read through consensus (no write, no lease) tells
		// a held lock, so waiting contenders do not load the cluster with
		// writes. The transaction below still decides.
		r, err := b.cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithCountOnly())
		if err != nil {
			return 0, classify(err)
		}
		if r.Count > 0 {
			return 0, driver.ErrContended
		}
	}
	if sp, ok := b.takeSpare(ttl); ok {
		fence, err, again := b.acquireOnSpare(ctx, req, ttl, sp)
		if !again {
			return fence, err
		}
	}
	sent := time.Now()
	lease, err := b.grant(ctx, ttl)
	if err != nil {
		return 0, classify(err)
	}
	resp, err := b.put(ctx, req, lease)
	if err != nil {
		b.unknown(req, lease)
		return 0, classify(err)
	}
	return b.settle(req, ttl, lease, sent, resp)
}

// checkToken refuses a token that cannot be written in a key's value
// (etcdkey.Value): a final error.
func checkToken(req *driver.Request) error {
	if !etcdkey.ValidToken(req.Token) {
		return fmt.Errorf("lockkit: etcd: token %q of %q contains a NUL byte, which ends the token in the etcd value layout: %w", req.Token, req.Key, driver.ErrFinal)
	}
	return nil
}

// put writes req's key on lease (etcdkey.Name), bound to lease, when req.Key
// has no key at all: one transaction.
func (b *backend) put(ctx context.Context, req *driver.Request, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	start, end := etcdkey.Range(req.Key)
	return b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(start).WithRange(end), "=", 0)).
		Then(clientv3.OpPut(etcdkey.Name(req.Key, int64(lease)), etcdkey.Value(req.Token, req.Holder), clientv3.WithLease(lease))).
		Commit()
}

// unknown ends an attempt whose write of req's key on lease may have been
// done: revoking the lease deletes the key, and the Client's release of the
// token (which it repeats when the outcome is unknown) deletes it if it is
// this lease's and holds this token (never recycled, the lease is never
// bound to another acquisition's key).
func (b *backend) unknown(req *driver.Request, lease clientv3.LeaseID) {
	b.remember(req.Token, &acq{key: etcdkey.Name(req.Key, int64(lease)), val: etcdkey.Value(req.Token, req.Holder), lease: lease})
	b.revokeLater(lease)
}

// settle ends an attempt whose put answered, on a lease live for ttl from
// sent: granted, or contended (nothing written; the lease is kept).
func (b *backend) settle(req *driver.Request, ttl int64, lease clientv3.LeaseID, sent time.Time, resp *clientv3.TxnResponse) (int64, error) {
	if !resp.Succeeded { // held, or waited for: nothing was written
		b.recycle(ttl, lease, sent)
		b.setContended(req.Key, true)
		return 0, driver.ErrContended
	}
	b.setContended(req.Key, false)
	a := &acq{key: etcdkey.Name(req.Key, int64(lease)), lease: lease, rev: resp.Header.Revision, ttl: ttl, renewed: sent}
	b.remember(req.Token, a)
	return fenceOf(a, req.Fencing), nil
}

// acquireOnSpare is an attempt on a spare lease. A spare whose last
// renewal was sent less than ttl/reuseWithin ago is used as it is: the put
// alone, one request, and a grant reports that renewal's send as the start
// of its TTL (req.TTLFrom), which the server counts from a moment after it
// and never shortens (a new leader only extends a lease's remaining TTL), so
// the lease loses at most ttl/reuseWithin of its validity. An older spare's
// keep-alive and the put are sent together and both awaited, so the
// keep-alive costs no round trip of its own; the attempt is granted only
// when both succeeded, and its TTL counts from the keep-alive's send. Either
// way the put wrote the key while the spare still lived (a put on a lease
// that expired or was revoked is refused). again: the spare was gone
// (expired, or revoked) and nothing of this attempt remains; the caller
// tries again on a new grant.
func (b *backend) acquireOnSpare(ctx context.Context, req *driver.Request, ttl int64, sp spare) (fence int64, err error, again bool) {
	sent := time.Now()
	kept := make(chan error, 1)
	recent := time.Since(sp.renewed) < time.Duration(ttl)*time.Second/reuseWithin
	if recent {
		sent = sp.renewed // no keep-alive: the TTL counts from that renewal
		kept <- nil
	} else {
		go func() {
			kept <- b.ka.keepAliveOnce(ctx, sp.id)
		}()
	}
	resp, err := b.put(ctx, req, sp.id)
	kaErr := <-kept
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// Refused: nothing was written, and the spare is gone.
		return 0, nil, true
	case err != nil:
		b.unknown(req, sp.id)
		return 0, classify(err), false
	case errors.Is(kaErr, rpctypes.ErrLeaseNotFound):
		// The spare expired or was revoked: etcd deletes a lease's keys
		// in the revoke, so a key the put wrote before it is gone, and a
		// put after it was refused.
		if !resp.Succeeded {
			b.setContended(req.Key, true)
			return 0, driver.ErrContended, false
		}
		return 0, nil, true
	case kaErr != nil:
		// The lease's renewal is unknown: it is never granted.
		if !resp.Succeeded {
			b.recycle(ttl, sp.id, sp.renewed)
		} else {
			b.unknown(req, sp.id)
		}
		return 0, classify(kaErr), false
	}
	fence, err = b.settle(req, ttl, sp.id, sent, resp)
	if err == nil && recent {
		req.TTLFrom = sent
	}
	return fence, err, false
}

// reuseWithin: a spare renewed less than ttl/reuseWithin ago is granted
// without a keep-alive of its own (acquireOnSpare). At 20 a lease keeps at
// least 95% of its TTL (less drift), and a lock taken again within 100ms of
// its last renewal (TTL 2s; 500ms at 10s) costs one request, not two.
const reuseWithin = 20

func fenceOf(a *acq, fencing bool) int64 {
	if fencing {
		return a.rev
	}
	return 0
}

func (b *backend) remember(token string, a *acq) {
	b.mu.Lock()
	b.acqs[token] = a
	b.mu.Unlock()
}

// lookup is token's acquisition of key, as this backend granted it; nil when
// it granted none (a stale token). A key is never taken for an acquisition
// by its name alone.
func (b *backend) lookup(key, token string) *acq {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.acqs[token]; a != nil && a.key == etcdkey.Name(key, int64(a.lease)) {
		return a
	}
	return nil
}

// Extend keeps this acquisition's own lease alive, then checks that its own
// key is still there with its create revision. Both are hedged: a member that
// stopped answering may hold the keep-alive stream, or be the one the
// balancer picks for the read.
func (b *backend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	secs, err := b.check(key, ttl)
	if err != nil {
		return false, err
	}
	a := b.lookup(key, token)
	if a == nil {
		return false, nil
	}
	if a.ttl != 0 && a.ttl != secs {
		return false, fmt.Errorf("lockkit: etcd: extend %s for %v: its lease was granted for %ds, and etcd keeps a lease's TTL: %w", key, ttl, a.ttl, driver.ErrFinal)
	}
	if err := b.keepAlive(ctx, a); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			b.claim(token, a) // expired: its key is gone with it
			return false, nil
		}
		return false, classify(err)
	}
	resp, err := hedged(ctx, hedges, func(ctx context.Context, _ int) (*clientv3.GetResponse, error) {
		return b.cli.Get(ctx, a.key)
	})
	if err != nil {
		return false, classify(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != a.rev {
		// Deleted under it: the lease guards nothing any more.
		if b.claim(token, a) {
			b.revokeLater(a.lease)
		}
		return false, nil
	}
	return true, nil
}

// keepAlive renews a's lease for its TTL, and records when it was sent.
func (b *backend) keepAlive(ctx context.Context, a *acq) error {
	sent := time.Now()
	if err := b.ka.keepAliveOnce(ctx, a.lease); err != nil {
		return err
	}
	b.mu.Lock()
	a.renewed = sent
	b.mu.Unlock()
	return nil
}

// Release deletes this acquisition's own key if it is still its own (its
// create revision), in one transaction; held reports whether it was.
func (b *backend) Release(ctx context.Context, key, token string) (bool, error) {
	a := b.lookup(key, token)
	if a == nil {
		return false, nil
	}
	held, err := b.deleteOwn(ctx, token, a)
	if err != nil {
		return false, err // remembered: a retry finds it
	}
	return held, nil
}

// deleteOwn gives a back: it deletes a's key if it is still a's (its create
// revision; its lease and value, which holds the token, when the revision is
// not known: a write whose reply was lost), in one transaction; nothing is
// ever deleted by its name alone, which a later acquisition on the same
// lease writes again. The
// lease, bound to no key any more, is kept for a later acquisition
// (recycle); when the key was not a's any more, it is revoked.
func (b *backend) deleteOwn(ctx context.Context, token string, a *acq) (bool, error) {
	own := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.key), "=", a.rev)}
	if a.rev == 0 {
		own = []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(a.key), "=", a.lease), clientv3.Compare(clientv3.Value(a.key), "=", a.val)}
	}
	resp, err := b.cli.Txn(ctx).If(own...).Then(clientv3.OpDelete(a.key)).Commit()
	if err != nil {
		return false, classify(err)
	}
	if !b.claim(token, a) {
		// A renewal in flight found the key gone first and disposed of
		// the lease.
		return resp.Succeeded, nil
	}
	if !resp.Succeeded || a.rev == 0 { // a.rev 0: its revoke is under way
		b.revokeLater(a.lease)
		return resp.Succeeded, nil
	}
	b.mu.Lock()
	renewed := a.renewed // a renewal in flight may still write it
	b.mu.Unlock()
	b.recycle(a.ttl, a.lease, renewed)
	return true, nil
}

// wasContended reports whether the last attempt on key in this process
// found it held, less than a minute ago.
func (b *backend) wasContended(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.contended[key]
	return ok && time.Since(at) < time.Minute
}

// setContended records whether an attempt on key found it held (at most
// maxContended keys; beyond, the record starts again).
func (b *backend) setContended(key string, held bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !held {
		delete(b.contended, key)
		return
	}
	if len(b.contended) >= maxContended {
		clear(b.contended)
	}
	b.contended[key] = time.Now()
}

const maxContended = 4096

// claim ends token's acquisition a in this backend: it reports whether this
// caller is the one that did, and so the one that disposes of a's lease
// (recycles or revokes it). A release and a renewal in flight can both find
// a's key gone; only one of them may touch the lease, which may already
// carry another acquisition's key once recycled.
func (b *backend) claim(token string, a *acq) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.acqs[token] != a {
		return false
	}
	delete(b.acqs, token)
	return true
}

// A spare is a lease that no key is bound to any more (its acquisition was
// released, or its attempt was contended), kept for the next acquisition of
// the same TTL: an acquire then sends a keep-alive, which needs no write
// through consensus, where a grant needs one. Each lease still carries one
// acquisition's key at a time, and an acquisition on a spare is granted only
// once a keep-alive it sent succeeded (sent with its put: acquireOnSpare), so
// the TTL counts from after that send, as a grant's would; or, on a spare
// renewed less than ttl/reuseWithin ago, with no keep-alive, its TTL counted
// from that renewal's send.
type spare struct {
	id      clientv3.LeaseID
	renewed time.Time // when its last grant or keep-alive was sent
}

// maxSpares bounds the spare leases kept per TTL.
const maxSpares = 64

// lease is a lease of ttl seconds for a queue join, and when the grant or
// keep-alive that made it live for ttl was sent: a spare kept alive, or a
// new grant. (Acquire overlaps a spare's keep-alive with its put:
// acquireOnSpare.)
func (b *backend) lease(ctx context.Context, ttl int64) (clientv3.LeaseID, time.Time, error) {
	for {
		sp, ok := b.takeSpare(ttl)
		if !ok {
			break
		}
		sent := time.Now()
		err := b.ka.keepAliveOnce(ctx, sp.id)
		if err == nil {
			return sp.id, sent, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			b.recycle(ttl, sp.id, sp.renewed)
			return 0, time.Time{}, err
		}
	}
	sent := time.Now()
	id, err := b.grant(ctx, ttl)
	return id, sent, err
}

// takeSpare takes a spare of ttl seconds kept alive within the last half
// TTL; older ones are dropped (they expire with no key bound to them).
func (b *backend) takeSpare(ttl int64) (spare, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.spares[ttl]
	for len(l) > 0 {
		sp := l[len(l)-1]
		l = l[:len(l)-1]
		if time.Since(sp.renewed) < time.Duration(ttl)*time.Second/2 {
			b.spares[ttl] = l
			return sp, true
		}
	}
	b.spares[ttl] = l
	return spare{}, false
}

// recycle keeps lease, bound to no key, as a spare of ttl seconds, or
// revokes it when there are enough.
func (b *backend) recycle(ttl int64, id clientv3.LeaseID, renewed time.Time) {
	b.mu.Lock()
	if !b.closed && ttl > 0 && len(b.spares[ttl]) < maxSpares {
		b.spares[ttl] = append(b.spares[ttl], spare{id, renewed})
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.revokeLater(id)
}

// revoke revokes lease, bounded by ctx; a lease it misses expires with its
// TTL, and has no key by then.
func (b *backend) revoke(ctx context.Context, lease clientv3.LeaseID) {
	_, _ = b.cli.Revoke(ctx, lease)
}

// revokeLater revokes lease off the caller's path, bounded by the command
// timeout; Close waits for it. Once Close has begun (an acquisition still
// under way when Client.Close's ctx ended), the caller revokes it in line,
// bounded the same way: Close's wait may be over.
func (b *backend) revokeLater(lease clientv3.LeaseID) {
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.bg.Add(1)
	}
	b.mu.Unlock()
	if closed {
		b.revokeBounded(lease)
		return
	}
	go b.revokeCounted(lease)
}

// revokeCounted is revokeBounded for a revoke already added to b.bg.
func (b *backend) revokeCounted(lease clientv3.LeaseID) {
	defer b.bg.Done()
	b.revokeBounded(lease)
}

// revokeBounded revokes lease within the command timeout.
func (b *backend) revokeBounded(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout())
	defer cancel()
	b.revoke(ctx, lease)
}

func (b *backend) timeout() time.Duration {
	if b.cmdTimeout > 0 {
		return b.cmdTimeout
	}
	return 5 * time.Second
}

// Ping reads through the cluster's consensus (a linearizable read): it
// fails when the member has no leader or the cluster no quorum.
func (b *backend) Ping(ctx context.Context) error {
	_, err := b.cli.Get(ctx, "lockkit-ping", clientv3.WithCountOnly())
	return classify(err)
}

// Close revokes the spare leases, waits for the revokes in flight and
// forgets every acquisition; it does not close the client.
func (b *backend) Close() error {
	b.mu.Lock()
	b.closed = true
	var ids []clientv3.LeaseID
	for _, l := range b.spares {
		for _, sp := range l {
			ids = append(ids, sp.id)
		}
	}
	clear(b.spares)
	clear(b.acqs)
	b.bg.Add(len(ids)) // under b.mu: no revokeLater adds after this
	b.mu.Unlock()
	for _, id := range ids {
		go b.revokeCounted(id)
	}
	b.bg.Wait()
	b.ka.close()
	return nil
}

// classify marks the errors of a cluster that cannot serve locks now (no
// leader, no quorum, a member stopping, a request timed out in consensus,
// the connection down) as failures for the Client's breaker.
func classify(err error) error {
	if err == nil || errors.Is(err, driver.ErrContended) || errors.Is(err, driver.ErrFinal) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return driver.Failure(err)
	}
	switch rpctypes.Error(err) {
	case rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrNotCapable,
		rpctypes.ErrStopped, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
		rpctypes.ErrUnhealthy, rpctypes.ErrTooManyRequests, rpctypes.ErrNoSpace, rpctypes.ErrCorrupt:
		return driver.Failure(err)
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return driver.Failure(err)
	}
	return err
}
