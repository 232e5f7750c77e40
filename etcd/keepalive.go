package etcd

import (
	"context"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keeper sends the backend's keep-alives on one LeaseKeepAlive stream,
// opened at the first and opened again after it breaks, where the client's
// KeepAliveOnce opens a stream per call. The server answers a stream's
// keep-alives one by one, in the order it received them, each naming its
// lease: an answer is the oldest keep-alive of its lease still unanswered on
// that stream. A keep-alive whose stream broke before its answer came is
// sent again through KeepAliveOnce (the client's retries), bounded by the
// caller's ctx; a keep-alive renews a lease from when the server gets it, so
// a second one is harmless, and the caller counts validity from its first
// send, which is earlier.
type keeper struct {
	cli *clientv3.Client

	mu      sync.Mutex // guards cur, opening and closed
	cur     *kaStream
	opening *kaOpening // the stream being opened; nil when none
	closed  bool
	base    context.Context // cancelled by close: ends every stream, and an opening
	stop    context.CancelFunc
	wg      sync.WaitGroup // the openings and the streams' receivers
}

// kaOpening is a stream being opened, off the callers' path: gRPC holds a
// new stream while the connection is CONNECTING, up to its connect timeout
// (20s at least) when the member accepts the connection but does not answer
// its handshake (a stopped member). Each caller waits for it within its own
// ctx; close cancels it (k.base).
type kaOpening struct {
	done chan struct{} // closed once s and err are set
	s    *kaStream
	err  error
}

// kaStream is one stream, and its keep-alives waiting for their answers.
type kaStream struct {
	send   sync.Mutex // orders waiting's appends as the sends
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc

	mu      sync.Mutex
	waiting map[int64][]chan kaAnswer // by lease, oldest first
	err     error                     // set when the stream broke
}

type kaAnswer struct {
	ttl int64
	err error
}

func newKeeper(cli *clientv3.Client) *keeper {
	base, stop := context.WithCancel(context.Background())
	return &keeper{cli: cli, base: base, stop: stop}
}

// keepAliveOnce renews lease id once: nil when the server renewed it,
// rpctypes.ErrLeaseNotFound when the lease is gone, as the client's
// KeepAliveOnce answers. The keep-alive goes on the stream; one that the
// stream leaves unanswered is sent again through the client's KeepAliveOnce,
// beside it (hedged): the stream may be open on a member that stopped
// answering. A stream so passed by is ended (onStream), and the next
// keep-alive opens one again.
func (k *keeper) keepAliveOnce(ctx context.Context, id clientv3.LeaseID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := hedged(ctx, hedges, func(ctx context.Context, n int) (struct{}, error) {
		if n > 0 {
			_, err := k.cli.KeepAliveOnce(ctx, id)
			return struct{}{}, err
		}
		return struct{}{}, k.viaStream(ctx, id)
	})
	return err
}

// viaStream renews lease id once on the stream; when there is none, or it
// broke first, through the client's KeepAliveOnce.
func (k *keeper) viaStream(ctx context.Context, id clientv3.LeaseID) error {
	if s, err := k.stream(ctx); err == nil {
		broke, err := k.onStream(ctx, s, id)
		if !broke {
			return err
		}
		k.broken(s)
	}
	// No stream, or it broke: the client's own call, with its retries.
	_, err := k.cli.KeepAliveOnce(ctx, id)
	return err
}

// onStream sends a keep-alive of id on s and awaits its answer; broke: s
// broke first (err is its error). A ctx that ends first ends s too, a Send
// under way included: its member may be stopped, and the next keep-alive
// opens a stream again, on a member the balancer picks; the others waiting
// on s go through KeepAliveOnce.
func (k *keeper) onStream(ctx context.Context, s *kaStream, id clientv3.LeaseID) (broke bool, err error) {
	stop := context.AfterFunc(ctx, func() { k.broken(s) })
	defer stop()
	ch, err := s.sendKeepAlive(id)
	if err == nil {
		select {
		case a := <-ch:
			switch {
			case a.err != nil:
				err = a.err
			case a.ttl <= 0:
				return false, rpctypes.ErrLeaseNotFound
			default:
				return false, nil
			}
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil {
		return false, clientv3.ContextError(ctx, ctx.Err())
	}
	return true, err
}

// stream is the current stream, opened when there is none, awaited within
// ctx.
func (k *keeper) stream(ctx context.Context) (*kaStream, error) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, context.Canceled
	}
	if k.cur != nil {
		s := k.cur
		k.mu.Unlock()
		return s, nil
	}
	o := k.opening
	if o == nil {
		o = &kaOpening{done: make(chan struct{})}
		k.opening = o
		k.wg.Add(1)
		go k.open(o)
	}
	k.mu.Unlock()
	select {
	case <-o.done:
		return o.s, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// open opens a stream for o and makes it the current one, unless the keeper
// was closed meanwhile.
func (k *keeper) open(o *kaOpening) {
	defer k.wg.Done()
	// As the client's own keep-alive stream: a member without a leader
	// ends it, rather than keeping keep-alives it cannot renew.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.base))
	st, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	k.mu.Lock()
	defer close(o.done)
	defer k.mu.Unlock()
	k.opening = nil
	switch {
	case err != nil:
		cancel()
		o.err = err
		return
	case k.closed:
		cancel() // ends st
		o.err = context.Canceled
		return
	}
	s := &kaStream{stream: st, cancel: cancel, waiting: make(map[int64][]chan kaAnswer)}
	k.cur = s
	o.s = s
	k.wg.Add(1) // open's own count is still held: close's Wait has not ended
	go func() {
		defer k.wg.Done()
		s.receive()
		k.broken(s)
	}()
}

// broken forgets s, if it is still the current stream, and ends it.
func (k *keeper) broken(s *kaStream) {
	k.mu.Lock()
	if k.cur == s {
		k.cur = nil
	}
	k.mu.Unlock()
	s.cancel()
}

// close ends the stream and an opening under way, and waits for them.
func (k *keeper) close() {
	k.mu.Lock()
	k.closed = true
	k.cur = nil
	k.mu.Unlock()
	k.stop()
	k.wg.Wait()
}

// sendKeepAlive sends a keep-alive of id; its answer comes on the channel.
func (s *kaStream) sendKeepAlive(id clientv3.LeaseID) (chan kaAnswer, error) {
	ch := make(chan kaAnswer, 1)
	s.send.Lock()
	defer s.send.Unlock()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, s.err
	}
	s.waiting[int64(id)] = append(s.waiting[int64(id)], ch)
	s.mu.Unlock()
	if err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		return nil, err // the receiver fails ch with the stream
	}
	return ch, nil
}

// receive hands each answer to the oldest keep-alive of its lease waiting,
// until the stream breaks; then it fails every one still waiting.
func (s *kaStream) receive() {
	for {
		resp, err := s.stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.err = err
			for _, l := range s.waiting {
				for _, ch := range l {
					ch <- kaAnswer{err: err}
				}
			}
			clear(s.waiting)
			s.mu.Unlock()
			return
		}
		if l := s.waiting[resp.ID]; len(l) > 0 {
			l[0] <- kaAnswer{ttl: resp.TTL}
			if len(l) == 1 {
				delete(s.waiting, resp.ID)
			} else {
				s.waiting[resp.ID] = l[1:]
			}
		}
		s.mu.Unlock()
	}
}
