package lockkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// faultyReply is a go-redis hook that answers every command naming key
// with an error whose text carries a formatting fault, as a nil wrapped
// with %w prints.
type faultyReply struct{ key string }

func (h faultyReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h faultyReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !slices.Contains(cmd.Args(), any(h.key)) {
			return next(ctx, cmd)
		}
		err := errors.New("reply: %!w(<nil>)")
		cmd.SetErr(err)
		return err
	}
}
func (h faultyReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFormattingFaultFailsTheRun: every error lockkit hands a caller is
// checked on its way out (internal/errcheck), and every test binary that
// imports internal/testserver (the fault suites of lockkit, postgres,
// etcd, zookeeper and the fault harness) makes one whose text shows "%!"
// panic. So no test on a real server passes while such an error reaches
// it, whatever the test asserted. Here the fault comes from the wire, and
// the TryDo that would return it panics instead.
func TestFormattingFaultFailsTheRun(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	c := newClientOver(t, rdb)
	l := lockOn(testDomain(t, c, Policy{TTL: time.Second}), "faulty")
	rdb.AddHook(faultyReply{l.Key()})
	var (
		got any
		err error
	)
	func() {
		defer func() { got = recover() }()
		err = l.TryDo(t.Context(), func(context.Context, *Lease) error { return nil })
	}()
	if got == nil || !strings.Contains(fmt.Sprint(got), "%!w(<nil>)") {
		t.Fatalf("TryDo returned %v (recovered %v); want a panic naming the faulty error", err, got)
	}
	t.Logf("recovered: %v", got)
}
