package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/schema"
	"github.com/redis/go-redis/v9"
)

// forceScript takes a lock away from the holder the operator observed: if
// the lock still holds that token it issues the next fence by the runtime's
// one rule (when ARGV[2] is '1') and deletes the lock (when ARGV[3] is '1';
// a FIFO lock is deleted and handed over by internal/fifo's release script
// instead). One script, so no other holder can come between the check, the
// fence and the delete.
//
// KEYS[1] lock, KEYS[2] fence counter; ARGV[1] the observed token.
// Returns {1, old counter or ”, new fence} or {0, counter or ”, value or ”}.
var forceScript = redis.NewScript(holder.OwnsLua + policy.NextFenceLua + `
local v = redis.call('GET', KEYS[1])
local old = redis.call('GET', KEYS[2]) or ''
if not owns(v, ARGV[1]) then
  return {0, old, v or ''}
end
local fence = 0
if ARGV[2] == '1' then
  local bad
  fence, bad = next_fence(KEYS[2])
  if bad then
    return bad_fence(2, bad)
  end
end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
end
return {1, old, fence_text(fence)}
`)

// Errors of ForceRelease; the command line maps them to exit codes.
var (
	// ErrNotLockKey: the key is no lock key of the schema.
	ErrNotLockKey = errors.New("not a lock key of the schema")
	// ErrNoFencing: the key's domain does not fence and the caller did not
	// accept that (ForceOptions.NoFenceOK).
	ErrNoFencing = errors.New("the domain does not fence")
	// ErrNotHeld: the key is not held (or its holder changed or let go
	// while the release was under way).
	ErrNotHeld = errors.New("not held")
)

// ForceOptions are the options of ForceRelease.
type ForceOptions struct {
	// NoFenceOK lets ForceRelease take a lock of a domain without fencing:
	// the old holder may then go on writing, unfenced, believing it holds
	// the lock until its next renewal.
	NoFenceOK bool
	// Token, when set, is the holder token the operator expects; the lock
	// is released only if it still holds it.
	Token string
}

// Forced is what ForceRelease did. JSON field names are stable.
type Forced struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	// Token and Holder are the holder the lock was taken from.
	Token  string  `json:"token"`
	Holder *Holder `json:"holder,omitempty"`
	// Fencing: the domain fences, and NewFence was issued.
	Fencing bool `json:"fencing"`
	// OldFence is the counter before the release (nil when there was none);
	// NewFence the fence the release issued, above every fence the old
	// holder had (0 without fencing).
	OldFence *int64 `json:"old_fence"`
	NewFence int64  `json:"new_fence"`
	// HandedTo is the FIFO waiter the lock went to, nil when none; its
	// Fence is the fence the handover issued (0 without fencing).
	HandedTo *Handover `json:"handed_to,omitempty"`
}

// Handover is the waiter a forced release handed a FIFO lock to.
type Handover struct {
	Token  string  `json:"token"`
	Holder *Holder `json:"holder,omitempty"`
	Fence  int64   `json:"fence"`
}

// Domain returns the domain whose pattern produced key, or ErrNotLockKey.
func (in *Inspector) Domain(key string) (*schema.Domain, error) {
	d, _, ok := in.dec.Decode(key)
	if !ok {
		return nil, fmt.Errorf("%q: %w %s (prefix %q): no domain's pattern produces it", key, ErrNotLockKey, in.file.Path, in.file.Prefix)
	}
	return d, nil
}

// ForceRelease takes key away from its holder. On a fencing domain it
// first issues the next fence (max(counter+1, server µs), the runtime's
// rule), so that every later holder's fence is above the old holder's and
// fence.Set and fence.Table reject the old holder's writes once a later
// holder has written; then it deletes the lock, in the same script, checked
// against the token it read. On a FIFO domain the lock is deleted by
// internal/fifo's release script, which hands it over to the head waiter
// exactly as the holder's own release would (with that waiter's fence).
// The old holder learns of it at its next renewal (ErrLockLost).
//
// Errors: ErrNotLockKey, ErrNoFencing, ErrNotHeld (wrapped, naming the
// key), or Redis failing.
func (in *Inspector) ForceRelease(ctx context.Context, rdb redis.UniversalClient, key string, o ForceOptions) (*Forced, error) {
	d, err := in.Domain(key)
	if err != nil {
		return nil, err
	}
	if !d.Fencing && !o.NoFenceOK {
		return nil, fmt.Errorf("%s: %w (domain %s, pattern %q): the old holder's writes could not be rejected; accept that explicitly to release anyway", key, ErrNoFencing, d.Name, d.Pattern)
	}
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotHeld)
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", key, err)
	}
	tok, h, _ := holder.Decode(v)
	if o.Token != "" && o.Token != tok {
		return nil, fmt.Errorf("%s: %w by token %s (it holds %s)", key, ErrNotHeld, o.Token, tok)
	}
	fifoDomain := d.Wait == policy.WaitFIFOName
	keys := []string{key, policy.FenceKey(key)}
	r, err := forceScript.Run(ctx, rdb, keys, tok, bit(d.Fencing), bit(!fifoDomain)).Slice()
	if err != nil {
		return nil, fmt.Errorf("releasing %s: %w", key, rediswire.FenceError(err, keys))
	}
	if len(r) != 3 {
		return nil, fmt.Errorf("releasing %s: unexpected reply %v", key, r)
	}
	ok, _ := r[0].(int64)
	old, _ := r[1].(string)
	third, _ := r[2].(string)
	if ok != 1 {
		now, _, _ := holder.Decode(third)
		if third == "" {
			return nil, fmt.Errorf("%s: %w: released or expired since it was read", key, ErrNotHeld)
		}
		return nil, fmt.Errorf("%s: %w by %s any more (now %s)", key, ErrNotHeld, tok, now)
	}
	f := &Forced{Domain: d.Name, Key: key, Token: tok, Fencing: d.Fencing}
	if !h.IsZero() {
		f.Holder = &Holder{Host: h.Host, PID: h.PID, Owner: h.Owner, TraceID: h.TraceID}
	}
	if n, err := strconv.ParseInt(old, 10, 64); err == nil {
		f.OldFence = &n
	}
	f.NewFence, _ = strconv.ParseInt(third, 10, 64)
	if !fifoDomain {
		return f, nil
	}
	held, err := fifo.Release(ctx, rdb, key, tok, "")
	if err != nil {
		return f, fmt.Errorf("releasing %s (fence %d issued): %w", key, f.NewFence, err)
	}
	if !held {
		return f, fmt.Errorf("%s: %w by %s any more after the fence was issued (released or expired meanwhile)", key, ErrNotHeld, tok)
	}
	// Who got it: the handover wrote the head's value and fence in the
	// release script; read them back.
	pipe := rdb.Pipeline()
	val := pipe.Get(ctx, key)
	fence := pipe.Get(ctx, policy.FenceKey(key))
	_, _ = pipe.Exec(ctx)
	if nv, err := val.Result(); err == nil {
		nt, nh, _ := holder.Decode(nv)
		ho := &Handover{Token: nt}
		if !nh.IsZero() {
			ho.Holder = &Holder{Host: nh.Host, PID: nh.PID, Owner: nh.Owner, TraceID: nh.TraceID}
		}
		if d.Fencing {
			ho.Fence, _ = fence.Int64()
		}
		f.HandedTo = ho
	}
	return f, nil
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
