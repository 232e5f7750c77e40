package rediswire

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// pipeHook records the pipelines of INCRBY commands a client sends, and
// can hold each one before it goes out (a stalled batch, without a timer).
type pipeHook struct {
	mu    sync.Mutex
	sizes []int
	hold  chan struct{} // when set, each pipeline waits for it to close
	held  chan struct{} // gets a value when a pipeline starts waiting
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "incrby" {
			return next(ctx, cmds) // go-redis's own: a new connection's handshake
		}
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		hold, held := h.hold, h.held
		h.mu.Unlock()
		if hold != nil {
			held <- struct{}{}
			<-hold
		}
		return next(ctx, cmds)
	}
}

func (h *pipeHook) pipelines() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// combinerFixture is a Combiner of the given limit on a client of r
// (ContextTimeoutEnabled as the README builds it, unless plain), and a
// direct client to check what the server holds.
func combinerFixture(t *testing.T, r *testserver.Redis, limit int, plain bool) (*Combiner, *pipeHook, *redis.Client) {
	t.Helper()
	rdb := r.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = !plain })
	h := &pipeHook{}
	rdb.AddHook(h)
	return NewCombiner(rdb, limit), h, r.Client(t)
}

// waitState polls q until ok says its state is reached: which sends are in
// flight and which wait is the Combiner's own business, so the tests read
// it rather than guess from time.
func waitState(t *testing.T, q *Combiner, what string, ok func(busy, queued int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		busy, queued := q.busy, len(q.queue)
		q.mu.Unlock()
		if ok(busy, queued) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never reached (busy %d, queued %d)", what, busy, queued)
		}
		time.Sleep(time.Millisecond)
	}
}

func incr(ctx context.Context, q *Combiner, key string, by int) *redis.Cmd {
	return Once(ctx, q, "incrby", key, by)
}

// stall pauses r with one command of q (limit 1) in flight, the blocker, on
// a connection already open: what q is sent next waits for a batch. It
// returns the blocker's outcome, which comes once r is resumed.
func stall(t *testing.T, r *testserver.Redis, q *Combiner) <-chan error {
	t.Helper()
	ctx := t.Context()
	if err := incr(ctx, q, "warm", 1).Err(); err != nil {
		t.Fatal(err)
	}
	r.Pause(t)
	block := make(chan error, 1)
	go func() { block <- incr(ctx, q, "blocker", 1).Err() }()
	waitState(t, q, "the blocker in flight", func(busy, _ int) bool { return busy == 1 })
	return block
}

// A lone caller's commands go out one by one, as on the client itself: no
// pipeline.
func TestCombinerLoneCaller(t *testing.T) {
	r := testserver.StartRedis(t)
	q, h, direct := combinerFixture(t, r, 1, false)
	ctx := t.Context()
	for i := range 20 {
		if n, err := incr(ctx, q, "lone", 1).Int64(); err != nil || n != int64(i+1) {
			t.Fatalf("INCRBY #%d = %d, %v", i+1, n, err)
		}
	}
	if p := h.pipelines(); len(p) != 0 {
		t.Errorf("a lone caller's commands went out in pipelines %v, want none", p)
	}
	if v := direct.Get(ctx, "lone").Val(); v != "20" {
		t.Errorf("lone = %q, want 20", v)
	}
}

// Commands that come while the limit of sends is in flight wait, and go out
// together, in one pipeline, once one of those returns; each caller gets
// its own command's reply, and each command ran once.
func TestCombinerBatches(t *testing.T) {
	r := testserver.StartRedis(t)
	q, h, direct := combinerFixture(t, r, 1, false)
	ctx := t.Context()
	block := stall(t, r, q)
	const n = 8
	type reply struct {
		i   int
		n   int64
		err error
	}
	replies := make(chan reply, n)
	for i := range n {
		go func() {
			v, err := incr(ctx, q, "k"+strconv.Itoa(i), 10+i).Int64()
			replies <- reply{i, v, err}
		}()
	}
	waitState(t, q, "the others queued", func(_, queued int) bool { return queued == n })
	r.Resume(t)
	if err := <-block; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	for range n {
		got := <-replies
		if got.err != nil || got.n != int64(10+got.i) {
			t.Errorf("k%d: INCRBY %d answered %d, %v: want its own reply", got.i, 10+got.i, got.n, got.err)
		}
	}
	if p := h.pipelines(); len(p) != 1 || p[0] != n {
		t.Errorf("pipelines sent: %v, want one of %d", p, n)
	}
	for i := range n {
		if v := direct.Get(ctx, "k"+strconv.Itoa(i)).Val(); v != strconv.Itoa(10+i) {
			t.Errorf("k%d = %q on the server, want %d (run once)", i, v, 10+i)
		}
	}
	waitState(t, q, "every send done", func(busy, queued int) bool { return busy == 0 && queued == 0 })
}

// A command whose ctx ends while it waits for its batch returns then, with
// ctx's error, and is never sent; on a client with ContextTimeoutEnabled
// off as on one with it on.
func TestCombinerQueuedLeavesUnsent(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run("ContextTimeoutEnabled="+strconv.FormatBool(!plain), func(t *testing.T) {
			r := testserver.StartRedis(t)
			q, _, direct := combinerFixture(t, r, 1, plain)
			ctx := t.Context()
			block := stall(t, r, q)
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			// Returns while the server is still paused: Send is bounded by
			// its own ctx, whatever the batch ahead of it does.
			err := incr(short, q, "never", 1).Err()
			if err != context.DeadlineExceeded {
				t.Errorf("queued INCRBY under a 100ms ctx = %v, want context.DeadlineExceeded", err)
			}
			waitState(t, q, "the queue emptied", func(_, queued int) bool { return queued == 0 })
			r.Resume(t)
			if err := <-block; err != nil {
				t.Fatalf("blocker: %v", err)
			}
			waitState(t, q, "every send done", func(busy, queued int) bool { return busy == 0 && queued == 0 })
			if n := direct.Exists(ctx, "never").Val(); n != 0 {
				t.Errorf("the command that left the queue ran on the server")
			}
		})
	}
}

// A batch in flight: a member whose ctx ends, by its deadline or by its
// caller's cancel, returns then; the others in the batch get their replies
// all the same (the batch runs under none of its callers' cancellations),
// and what was sent ran once.
func TestCombinerBatchMemberLeaves(t *testing.T) {
	r := testserver.StartRedis(t)
	q, h, direct := combinerFixture(t, r, 1, false)
	ctx := t.Context()
	block := stall(t, r, q)

	timed, cancelTimed := context.WithTimeout(ctx, time.Hour) // ends below, in the batch
	defer cancelTimed()
	cancelled, cancel := context.WithCancel(ctx)
	errs := make(chan error, 3)
	// cancelled's command is queued first: it is the batch's first
	// command, whose ctx the batch's values come from.
	go func() { errs <- incr(cancelled, q, "cancelled", 1).Err() }()
	waitState(t, q, "cancelled queued", func(_, queued int) bool { return queued == 1 })
	go func() { errs <- incr(timed, q, "timed", 1).Err() }()
	stays := make(chan error, 1)
	go func() { stays <- incr(ctx, q, "stays", 1).Err() }()
	waitState(t, q, "three queued", func(_, queued int) bool { return queued == 3 })

	h.mu.Lock()
	h.hold, h.held = make(chan struct{}), make(chan struct{}, 1)
	h.mu.Unlock()
	r.Resume(t)
	if err := <-block; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	<-h.held // the batch of three is in flight, held before it is written
	cancel()
	cancelTimed()
	for range 2 {
		if err := <-errs; err != context.Canceled {
			t.Errorf("a member that left the batch in flight: %v, want context.Canceled", err)
		}
	}
	close(h.hold)
	if err := <-stays; err != nil {
		t.Errorf("the member that stayed: %v, want its reply", err)
	}
	if p := h.pipelines(); len(p) != 1 || p[0] != 3 {
		t.Errorf("pipelines: %v, want one of 3", p)
	}
	for _, k := range []string{"cancelled", "timed", "stays"} {
		if v := direct.Get(ctx, k).Val(); v != "1" {
			t.Errorf("%s = %q on the server, want 1: a batch member was sent once", k, v)
		}
	}
}

// At most once: a batch whose connection drops after the server ran it is
// not sent again by go-redis (whose default MaxRetries re-sends a plain
// pipeline after a network error), and each member gets the error.
func TestCombinerBatchSentAtMostOnce(t *testing.T) {
	r := testserver.StartRedis(t)
	p := testserver.StartDropProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &pipeHook{}
	rdb.AddHook(h)
	q := NewCombiner(rdb, 1)
	direct := r.Client(t)
	ctx := t.Context()
	block := stall(t, r, q)
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- incr(ctx, q, "once"+strconv.Itoa(i), 1).Err() }()
	}
	waitState(t, q, "the batch queued", func(_, queued int) bool { return queued == n })
	p.Arm(func(b []byte) bool { return bytes.Contains(b, []byte("once0")) })
	r.Resume(t)
	<-block
	for range n {
		if err := <-errs; err == nil {
			t.Errorf("a member of the cut batch got a reply, want the connection's error")
		}
	}
	if got := p.Seen(); got != 1 {
		t.Errorf("the batch reached the server %d times, want once (and its connection cut)", got)
	}
	for i := range n {
		k := "once" + strconv.Itoa(i)
		if v := direct.Get(ctx, k).Val(); v != "1" {
			t.Errorf("%s = %q on the server, want 1: the batch ran once and was not sent again", k, v)
		}
	}
	if ps := h.pipelines(); len(ps) != 1 {
		t.Errorf("pipelines: %v, want one (no retry)", ps)
	}
}
