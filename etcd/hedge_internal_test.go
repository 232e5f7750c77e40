package etcd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestHedged: a call left unanswered is sent again at each third of ctx's
// time, the first answer is the answer and the calls still under way are
// cancelled; without a deadline a call is sent once.
func TestHedged(t *testing.T) {
	t.Run("SecondAnswers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cut := make(chan error, 1)
		start := time.Now()
		v, err := hedged(ctx, 3, func(ctx context.Context, n int) (int, error) {
			if n == 0 { // the stopped member: answers only its cancel
				<-ctx.Done()
				cut <- ctx.Err()
				return 0, ctx.Err()
			}
			return n, nil
		})
		took := time.Since(start)
		if err != nil || v != 1 {
			t.Fatalf("hedged = %d, %v; want the second call's answer, 1", v, err)
		}
		if took < 900*time.Millisecond {
			t.Errorf("answered after %v; want the second call sent at a third of 3s, not before", took)
		}
		select {
		case err := <-cut:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("first call ended with %v; want it cancelled", err)
			}
		case <-time.After(time.Second):
			t.Error("the first call was not cancelled once the second answered")
		}
	})
	t.Run("NoneAnswers", func(t *testing.T) {
		// Sends at 0, 1s and 2s: a second of slack before the deadline
		// for the last, on a busy runner.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var calls atomic.Int32
		_, err := hedged(ctx, 3, func(ctx context.Context, n int) (int, error) {
			calls.Add(1)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v; want the deadline", err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("%d calls; want 3", n)
		}
	})
	t.Run("NoDeadline", func(t *testing.T) {
		var calls atomic.Int32
		want := errors.New("answered")
		_, err := hedged(context.Background(), 3, func(ctx context.Context, n int) (int, error) {
			calls.Add(1)
			time.Sleep(50 * time.Millisecond)
			return 0, want
		})
		if !errors.Is(err, want) || calls.Load() != 1 {
			t.Errorf("err = %v after %d calls; want its answer after one", err, calls.Load())
		}
	})
}
