package lockkit

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// A command's ctx is done at its deadline by a timer (the scheduler's), not
// only reported: Done closes, Err is DeadlineExceeded, and a ctx derived
// from it (as go-redis derives one for a dial) ends too. Ended before the
// deadline it reads Canceled. A parent that can end gets a ctx that follows
// it.
func TestCommandCtx(t *testing.T) {
	var c Client
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")

	ctx, scope := c.withCommandTimeout(parent, 50*time.Millisecond)
	if _, ok := ctx.(*commandCtx); !ok {
		t.Fatalf("a parent that cannot end got %T, want a commandCtx", ctx)
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > 50*time.Millisecond {
		t.Fatalf("deadline %v %v, want within 50ms", dl, ok)
	}
	if ctx.Value(key{}) != "v" {
		t.Fatal("the parent's value is lost")
	}
	if ctx.Err() != nil {
		t.Fatalf("Err before the deadline: %v", ctx.Err())
	}
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case <-derived.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no timer closed the command's ctx (or the one derived from it) at its deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(derived.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, derived %v; want DeadlineExceeded", ctx.Err(), derived.Err())
	}
	scope.end() // after the deadline: nothing left to do, and no second close

	ctx, scope = c.withCommandTimeout(parent, time.Hour)
	derived2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	scope.end()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("end left the command's ctx open")
	}
	<-derived2.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("Err after end %v, want Canceled", ctx.Err())
	}
	if len(c.sched.queue) != 0 {
		t.Fatalf("end left %d entries queued", len(c.sched.queue))
	}

	cancellable, stop := context.WithCancel(parent)
	ctx, scope = c.withCommandTimeout(cancellable, time.Hour)
	defer scope.end()
	stop()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the command's ctx did not follow its parent's cancellation")
	}
}

// context.AfterFunc on a command's ctx, and a ctx derived from it, cost no
// goroutine while the command runs (pgx watches every statement's ctx with
// context.AfterFunc): the context package uses the ctx's AfterFunc method.
// A registered function runs once the ctx is done (at the deadline, or at
// end), not if it was stopped first; one registered after that runs at once.
func TestCommandCtxAfterFunc(t *testing.T) {
	var c Client
	const n = 1000
	ctx, scope := c.withCommandTimeout(context.Background(), time.Hour)
	before := runtime.NumGoroutine()
	ran := make(chan int, 2*n)
	var stops []func() bool
	for i := range n {
		stops = append(stops, context.AfterFunc(ctx, func() { ran <- i }))
	}
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	if grew := runtime.NumGoroutine() - before; grew > n/2 {
		t.Fatalf("%d registrations started %d goroutines", n, grew)
	}
	for i := 1; i < n; i++ { // all but the first
		if !stops[i]() {
			t.Fatalf("stop %d before the end: false", i)
		}
	}
	scope.end()
	select {
	case i := <-ran:
		if i != 0 {
			t.Fatalf("function %d ran after it was stopped", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the function registered before end did not run")
	}
	<-derived.Done()
	if !errors.Is(derived.Err(), context.Canceled) {
		t.Fatalf("derived Err %v, want Canceled", derived.Err())
	}
	if stops[0]() {
		t.Fatal("stop after the function ran: true")
	}
	late := context.AfterFunc(ctx, func() { ran <- -1 })
	if i := <-ran; i != -1 {
		t.Fatalf("got %d, want the late registration to run", i)
	}
	if late() {
		t.Fatal("stop of a function that ran: true")
	}

	ctx, scope = c.withCommandTimeout(context.Background(), 20*time.Millisecond)
	defer scope.end()
	context.AfterFunc(ctx, func() { ran <- 1 })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no function ran at the deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v, want DeadlineExceeded", ctx.Err())
	}
}
