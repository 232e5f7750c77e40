package exampleenv

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Freeze is a go-redis hook that holds every command of its client while
// stopped, as a paused process (a long GC pause, SIGSTOP) or a stalled
// network would: nothing the replica sends reaches Redis, renewals
// included, until Resume. Add it with rdb.AddHook.
type Freeze struct {
	mu      sync.Mutex
	stopped chan struct{} // closed on Resume; nil while running
}

// Stop holds every later command until Resume.
func (f *Freeze) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == nil {
		f.stopped = make(chan struct{})
	}
}

// Resume lets held and later commands through.
func (f *Freeze) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped != nil {
		close(f.stopped)
		f.stopped = nil
	}
}

func (f *Freeze) wait(ctx context.Context) error {
	f.mu.Lock()
	ch := f.stopped
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DialHook implements redis.Hook.
func (f *Freeze) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (f *Freeze) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (f *Freeze) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}
