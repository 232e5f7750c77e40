package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/etcdkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// QueueAcquire joins key's queue once per token (its own key, bound to its
// own lease), or keeps its place alive on the next calls (a keep-alive of its
// lease), and grants when the token's key has the lowest create revision. A
// token whose lease expired while it waited (a paused waiter) joins again at
// the tail: it never waits for ever on a place it lost.
func (b *backend) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	ttl, err := b.check(req.Key, req.TTL)
	if err != nil {
		return driver.QueueResult{}, err
	}
	if err := checkToken(req); err != nil {
		return driver.QueueResult{}, err
	}
	sent := time.Now()
	b.mu.Lock()
	a := b.acqs[req.Token]
	var renewed time.Time
	if a != nil {
		renewed = a.renewed
	}
	b.mu.Unlock()
	// A place kept alive less than a third of the TTL ago is not kept alive
	// again: a push's wake-up goes straight to the read.
	if a != nil && sent.Sub(renewed) >= req.TTL/3 {
		if err := b.keepAlive(ctx, a); err != nil {
			if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return driver.QueueResult{}, classify(err)
			}
			b.claim(req.Token, a) // its place is gone: join again
			a = nil
		}
	}
	start, end := etcdkey.Range(req.Key)
	var resp *clientv3.TxnResponse
	if a == nil {
		lease, leased, err := b.lease(ctx, ttl)
		if err != nil {
			return driver.QueueResult{}, classify(err)
		}
		sent = leased
		k := etcdkey.Name(req.Key, int64(lease))
		// Join: write the key if the lease carries none, and read, after
		// the write, the last two keys (this one and its predecessor) and
		// how many keys are queued (the position: this key is the last).
		resp, err = b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, etcdkey.Value(req.Token, req.Holder), clientv3.WithLease(lease)),
				clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2), clientv3.WithKeysOnly()),
				clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithCountOnly())).
			Commit()
		if err != nil {
			b.revokeLater(lease) // deletes the key if it was written
			return driver.QueueResult{}, classify(err)
		}
		if resp.Succeeded {
			a = &acq{key: k, lease: lease, rev: resp.Header.Revision, ttl: ttl, renewed: sent}
			last := resp.Responses[1].GetResponseRange().Kvs
			a.predFrom = resp.Header.Revision + 1
			if len(last) == 2 {
				a.pred = string(last[1].Key)
			}
			b.remember(req.Token, a)
			return b.queueResult(req, a, sent, resp.Responses[2].GetResponseRange().Count), nil
		}
		// The lease already carries a key of this lock, which this backend
		// does not know (a lease carries one key at a time, and a spare
		// none): it is not adopted by its name. The lease is revoked,
		// which deletes that key: ask again.
		b.revokeLater(lease)
		return driver.QueueResult{}, fmt.Errorf("lockkit: etcd: queue join of %s: lease %x already carries a key of it; revoking the lease", req.Key, int64(lease))
	}
	// Refresh: the token's own key still there with its revision, its
	// predecessor, and its position.
	resp, err = b.cli.Txn(ctx).Then(
		clientv3.OpGet(a.key),
		clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithMaxCreateRev(a.rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly()),
		// Count ignores WithMaxCreateRev (the server counts before it
		// filters): the keys themselves are listed.
		clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithMaxCreateRev(a.rev), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return driver.QueueResult{}, classify(err)
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	if len(own) == 0 || own[0].CreateRevision != a.rev {
		// Deleted under the waiter: give the lease back and join again.
		if b.claim(req.Token, a) {
			b.revokeLater(a.lease)
		}
		return b.QueueAcquire(ctx, req)
	}
	pred := resp.Responses[1].GetResponseRange().Kvs
	b.mu.Lock()
	a.pred, a.predFrom = "", resp.Header.Revision+1
	if len(pred) == 1 {
		a.pred = string(pred[0].Key)
	}
	b.mu.Unlock()
	return b.queueResult(req, a, sent, int64(len(resp.Responses[2].GetResponseRange().Kvs))), nil
}

// queueResult is the answer for a at position pos (1: the holder), for a
// call sent at sent. A grant has what the lease has left from sent: the whole
// TTL when the lease was granted or kept alive in this call; otherwise what is
// left from its last keep-alive's send (Earlier: the Client extends it in
// time).
func (b *backend) queueResult(req *driver.Request, a *acq, sent time.Time, pos int64) driver.QueueResult {
	if pos <= 1 {
		b.mu.Lock()
		renewed := a.renewed
		b.mu.Unlock()
		r := driver.QueueResult{Granted: true, Fence: fenceOf(a, req.Fencing), LockTTL: req.TTL}
		if since := sent.Sub(renewed); since > 0 {
			r.LockTTL, r.Earlier = req.TTL-since, true
		}
		return r
	}
	// A waiter's lease needs a keep-alive (a QueueAcquire) within its TTL;
	// waking every third of it leaves two chances.
	return driver.QueueResult{Position: int(pos), Fallback: req.TTL / 3}
}

// QueueRelease gives key back (its own key, by create revision, and its
// lease): the successor's watch sees the deletion. It is also how a waiter
// leaves. prev (the holder's trace context) is not carried: etcd has no
// handover step that could take it to the next holder.
func (b *backend) QueueRelease(ctx context.Context, key, token, _ string) (bool, error) {
	return b.Release(ctx, key, token)
}

// QueueSubscribe returns the waiter of token: it watches its predecessor's
// key, as QueueAcquire last saw it, from Wait.
func (b *backend) QueueSubscribe(key, token string) driver.QueueWaiter {
	return &waiter{b: b, token: token}
}

type waiter struct {
	b     *backend
	token string

	mu      sync.Mutex
	watched string // the key watched; "" when none
	ch      clientv3.WatchChan
	made    chan clientv3.WatchChan // the watch of watched being made; nil once ch is set
	cancel  context.CancelFunc
}

// Wait returns "push" when the predecessor's key is deleted (released,
// expired or taken away), "subscribed" when the watch ended and the
// waiter should look again, "timer" after fallback.
func (w *waiter) Wait(ctx context.Context, fallback time.Duration) (string, error) {
	w.b.mu.Lock()
	var pred string
	var from int64
	if a := w.b.acqs[w.token]; a != nil {
		pred, from = a.pred, a.predFrom
	}
	w.b.mu.Unlock()
	w.mu.Lock()
	if pred != w.watched {
		w.stopLocked()
		if pred != "" {
			// The client's Watch returns only once the server has
			// answered the watch's creation: a member that stalls then
			// would hold Wait (and Close, behind w.mu) past ctx and the
			// fallback. It is made on a goroutine, and Wait waits for it
			// as it waits for an event. The watch outlives this call (the
			// next Wait goes on with it), so it is under a ctx of its own,
			// which stopLocked ends: then Watch returns at once.
			wctx, cancel := context.WithCancel(context.Background())
			made := make(chan clientv3.WatchChan, 1)
			go func() {
				made <- w.b.cli.Watch(clientv3.WithRequireLeader(wctx), pred, clientv3.WithRev(from), clientv3.WithFilterPut())
			}()
			w.watched, w.made, w.cancel = pred, made, cancel
		}
	}
	ch, made := w.ch, w.made
	w.mu.Unlock()
	t := time.NewTimer(fallback)
	defer t.Stop()
	for {
		select {
		case c := <-made:
			w.mu.Lock()
			if w.made == made { // not stopped meanwhile
				w.ch, w.made = c, nil
			}
			w.mu.Unlock()
			ch, made = c, nil
		case wr, ok := <-ch:
			if !ok || wr.Err() != nil || wr.Canceled {
				w.mu.Lock()
				w.stopLocked()
				w.mu.Unlock()
				return "subscribed", nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return "push", nil
				}
			}
		case <-t.C:
			return "timer", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (w *waiter) stopLocked() {
	if w.cancel != nil {
		w.cancel()
	}
	w.watched, w.ch, w.made, w.cancel = "", nil, nil, nil
}

// Granted: etcd pushes no grants; the next QueueAcquire finds it.
func (w *waiter) Granted() (driver.QueueResult, bool) { return driver.QueueResult{}, false }

func (w *waiter) Close() {
	w.mu.Lock()
	w.stopLocked()
	w.mu.Unlock()
}
