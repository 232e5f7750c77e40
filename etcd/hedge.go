package etcd

import (
	"context"
	"time"
)

// hedges is how many times a renewal's keep-alive, and its key check, may be
// sent at most (hedged).
const hedges = 3

// hedged runs call, and runs it again beside the calls under way each time
// they have gone 1/tries of ctx's time unanswered: tries calls at most,
// numbered from 0. The first answer is the answer; the calls still under way
// are cancelled. Without a deadline on ctx, call runs once.
//
// A member that accepts connections and answers nothing (stopped, stalled
// on its disk, paused with its VM) keeps its connection READY until gRPC's
// keep-alive, when configured, gives up on it (10s at the least), so the
// round-robin balancer goes on handing it a share of the calls, and a stream
// opened on it stays open. A call sent again is picked onto another
// connection, while the first may still answer. Only for calls that may be
// served twice: a keep-alive renews a lease from when the server gets it,
// and a read changes nothing.
func hedged[T any](ctx context.Context, tries int, call func(ctx context.Context, n int) (T, error)) (T, error) {
	dl, ok := ctx.Deadline()
	if !ok || tries < 2 {
		return call(ctx, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		v   T
		err error
	}
	answers := make(chan answer, tries) // a call cut short still sends
	next := time.NewTimer(time.Until(dl) / time.Duration(tries))
	defer next.Stop()
	start := func(n int) {
		go func() {
			v, err := call(ctx, n)
			answers <- answer{v, err}
		}()
	}
	start(0)
	for n := 1; ; {
		select {
		case a := <-answers:
			return a.v, a.err
		case <-next.C:
			start(n)
			if n++; n < tries {
				next.Reset(time.Until(dl) / time.Duration(tries-n+1))
			}
		}
	}
}
