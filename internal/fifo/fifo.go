// Package fifo is the Redis side of fair waiting: a FIFO queue of waiters per
// lock key, kept in Redis and maintained by Lua scripts on the server's
// clock, and push wake-up of the waiter at the head of the queue over
// Pub/Sub (SPUBLISH on a Cluster, PUBLISH otherwise), with a timer fallback.
//
// # Keys
//
// A lock key is prefix{suffix}: the braces are the Cluster hash tag. Every
// key and channel the package derives from it appends to it, so all share
// the lock's hash slot:
//
//	key          the lock: its value is holder.Value(token, description)
//	key:fence    the fence counter (fencing domains only)
//	key:q        the queue, a ZSET token -> join order (server µs, strictly increasing)
//	key:qd       the waiters' deadlines, a ZSET token -> server ms
//	key:qp       the trace context the last releaser left for the next holder
//	key:qc       the waiters: HASH token -> channel|TTL|waiter TTL|fencing|holder
//	key:w:<id>   the wake-up channel of the Notifier (one per go-redis client)
//	             whose id it is; a message's payload is the token it wakes
//
// # The protocol
//
// A contender calls [Acquire] with its token and its Notifier's channel for
// the key ([Notifier.Channel]). The lock is granted when it is free and the
// token is at the head of the queue, or the queue is empty; otherwise the
// token joins the tail of the queue (or keeps its place) in the same
// script, and its deadline is set to the server's now + WaiterTTL. Only the
// head may take a free lock, so a newcomer never overtakes a waiter, and a
// releaser that comes straight back queues at the tail.
//
// While queued, the contender subscribes through its client's [Notifier]
// and waits with [Waiter.Wait], for a push or for [Result.Fallback], then
// calls Acquire again. Every call refreshes its deadline: a waiter must call
// at least once per WaiterTTL (Fallback sees to it) or it is taken for dead
// and pruned; a live waiter pruned that way (paused for longer than
// WaiterTTL) rejoins at the tail on its next call, it never hangs.
//
// The lock's value is internal/holder's: the token, or the token, ';' and a
// description of who holds it (Request.Holder); every owner check is
// holder's owns(), and a handover writes the head's token and the
// description it queued with.
//
// [Release] deletes the lock if it holds the token and hands it over to the
// token now at the head, in the same script: the lock is set to the head's
// token (for min(its TTL, its WaiterTTL)), its fence issued, and the grant
// published on the channel of that token's client, so one release wakes
// one waiter in one process. When that client's Notifier is in the
// releaser's process, and the message reached its subscription, Release
// also gives it the message itself, as soon as the script's reply is in,
// rather than after the Pub/Sub hop (deliverLocal; the waiter takes the
// one message once). The push carries the grant ('token fence px
// previous joined'), so the waiter starts without another round trip, but
// only for the place in the queue it was handed over at: joined is the
// head's score in the queue, and a waiter takes a push as its grant only
// when joined is the Joined its last Acquire found it queued at. Every
// Acquire that found it queued there ran before the handover (after it, the
// token holds the lock or, once that expired, rejoins with a new, higher
// Joined), so the lease counts from the send of the last such Acquire, for
// px. A push delivered late, after the handover expired and the token
// rejoined, names the old place and is only a wake-up; so is a push that
// names no place (a releaser of v0.1.0). A waiter whose push is lost or
// stale finds the grant with its next Acquire (Result.Earlier).
// [Leave] takes a token out of the queue (a cancelled ctx, MaxWait, out of
// attempts) and, when the lock is free, hands it to the next head.
//
// A grant by handover starts before the waiter hears of it (from the push,
// or Result.Earlier from its next Acquire): the Client must count the lease
// from the send of the waiter's last Acquire before the handover (always
// earlier than it), and extend it to its full TTL before the handover's px
// runs out (Result.LockTTL is what the handover gave).
//
// # What a dead waiter costs
//
// A waiter that dies (or stops calling without leaving) stays queued until
// its deadline, WaiterTTL after its last call, and is pruned by the first
// script to run after that. If a release hands the lock to it before then,
// the lock stays with the dead token for min(TTL, WaiterTTL), the
// handover's PX; the next waiter, now the head, caps its Fallback F by the
// lock's PTTL and takes it then. Either way a dead waiter stalls the lock
// for at most min(TTL, WaiterTTL) + F after the release (WaiterTTL + F
// after its last call at worst); TestKilledWaiterDelaysByTheBound checks
// it. Waiters that die together expire together: their stalls overlap
// rather than add, unlike deadlines chained one after another. A member
// no waiter leaves behind (junk written under the queue keys: no deadline,
// one beyond its waiter TTL, or no readable :qc entry) is pruned as soon as
// it is the head, before any grant or handover. A dead
// holder is the lock TTL's business, as without a queue: the head's
// Fallback is capped by the lock's remaining TTL.
//
// # Failover and data loss
//
// A failover to a replica that missed the last writes, a restart without
// persistence or a FLUSHALL may lose the queue. Waiting is then unfair for
// a while: each waiter rejoins at the tail on its next call (at most one
// fallback later), in the order those calls arrive. Mutual exclusion is the
// lock key's and is unaffected: the grant is a SET on a free key, release
// checks the owner exactly (holder's owns()), and fences stay strictly increasing
// (max(counter + 1, server µs)).
//
// # Not for Redlock
//
// The queue lives on one deployment. Over N independent nodes there is no
// single order to be first in: N queues can disagree, and a waiter at the
// head of a majority need not exist. A Redlock client refuses FIFO
// domains (lockkit's Client.Domain says why).
//
// # Who uses it
//
// lockkit's Client, for domains with Policy.Wait = "fifo" (wait: fifo in
// lockkit.yaml): lockkit/fifo.go is the acquire loop described above,
// goredis/backend_fifo.go the Redis backend's side (one Notifier per
// go-redis client), and lockkit/fifo_test.go tests the whole through
// lockkit.New and Lock.Do.
package fifo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

var (
	// The grant scripts issue fences by internal/policy's one rule.
	//go:embed acquire.lua
	acquireBody   string
	acquireSrc    = holder.OwnsLua + policy.NextFenceLua + pruneLua + acquireBody
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed release.lua
	releaseBody   string
	releaseSrc    = holder.OwnsLua + policy.NextFenceLua + pruneLua + releaseBody
	releaseScript = redis.NewScript(releaseSrc)
)

// pruneLua removes waiters whose server-side deadline passed (dead, or gone
// without leaving), at most 100 a call; both scripts that look at the
// queue's head run it first. It then drops, from the head, up to 100
// members that no writer leaves behind: one with no deadline in :qd, no
// :qc entry that waiter() reads, or a deadline further than its own waiter
// TTL from now (inf, or a huge number), so junk at the head never stalls the
// queue for good. It returns the members it removed, then the head it left
// (nil when the queue is empty), the head's :qc entry and its score in the
// queue (as ZSCORE writes it), read on the way, so that its caller need not
// read them again. first, when given, is the queue's first member and score
// (ZRANGE 0 0 WITHSCORES) as the caller read it; it stands for the head
// unless the prune removes it or anything before it. waiter() is the one
// reader of a :qc entry.
const pruneLua = `local function waiter(w)
  if not w then
    return nil
  end
  return string.match(w, '^([^|]*)|(%d+)|(%d+)|(%d)(.*)$')
end
local function prune(queue, deadlines, waiters, now_ms, first)
  local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREM', deadlines, unpack(dead))
    redis.call('HDEL', waiters, unpack(dead))
    first = nil
  end
  for _ = 1, 100 do
    first = first or redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    local head = first[1]
    if not head then
      return dead
    end
    local w = redis.call('HGET', waiters, head)
    local deadline = tonumber(redis.call('ZSCORE', deadlines, head))
    local _, _, wttl = waiter(w)
    if deadline and wttl and deadline <= now_ms + tonumber(wttl) then
      return dead, head, w, first[2]
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', deadlines, head)
    redis.call('HDEL', waiters, head)
    dead[#dead + 1] = head
    first = nil
  end
  -- 100 dropped: the head is whatever stands first now, for the next call.
  local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
  if first[1] then
    return dead, first[1], redis.call('HGET', waiters, first[1]), first[2]
  end
  return dead
end
`

// Suffixes of the keys and the channel derived from a lock key (see the
// package doc). The fence suffix is the runtime's.
const (
	FenceSuffix     = policy.FenceSuffix
	QueueSuffix     = ":q"
	DeadlinesSuffix = ":qd"
	PreviousSuffix  = ":qp"
	WaitersSuffix   = ":qc"
	ChannelSuffix   = ":w:" // + the Notifier's id
)

// Request is one Acquire.
type Request struct {
	Key   string // the lock key, prefix{suffix}
	Token string // this acquisition's owner id
	// TTL is the lock's TTL, WaiterTTL how long the token stays queued
	// without calling Acquire again; whole milliseconds, at least 1ms.
	TTL, WaiterTTL time.Duration
	// Fencing issues a fence with the grant, in the same script.
	Fencing bool
	// Holder describes who takes the lock (holder.AppendDescription); the
	// lock's value is holder.Value(Token, Holder), also when the lock is
	// handed over to the token. "" stores the token alone.
	Holder string
	// Wake is the channel to publish on when the lock is handed over to
	// this token: its Notifier's Channel(Key). "" means no handover: the
	// token waits by its timer alone and takes the lock itself, unless
	// Notifier is set.
	Wake string
	// Notifier, when set and Wake is "", stands for Wake =
	// Notifier.Channel(Key), which it keeps boxed for the command.
	Notifier *Notifier
}

// Result is the outcome of one Acquire.
type Result struct {
	// Granted reports that the lock is now held for the token.
	Granted bool
	// Fence is the fencing number issued with the grant (0 without fencing).
	Fence int64
	// Previous is, on a grant from the queue, the trace context the
	// previous holder passed to Release ("" when none).
	Previous string
	// Earlier reports a grant that happened before this call: a release
	// handed the lock over to the token (its push lost or not yet read),
	// or an earlier call's reply was lost. Count the lease from the send
	// of the token's previous Acquire, not this one.
	Earlier bool

	// Position is the token's place in the queue when not granted: 1 is the
	// head, the next to be granted.
	Position int
	// LockTTL is the lock's remaining TTL: when not granted, 0 when the
	// lock is free (another waiter is at the head), -1 when it has no TTL;
	// when granted, the TTL the lock has, less than Request.TTL after a
	// handover (extend at once).
	LockTTL time.Duration
	// Joined is the token's join order as the server recorded it (its
	// score in the queue: server µs at joining, strictly increasing); on a
	// handover's push, the place the handover found the token at (0 when
	// the push did not say).
	Joined int64

	waiterTTL time.Duration
}

// Fallback is how long a queued waiter should wait for a push before it
// calls Acquire again anyway: max, shortened to the lock's remaining TTL for
// the head (a holder that died releases nothing and publishes nothing) and to
// a third of the waiter TTL (so that a live waiter's deadline is refreshed
// well before it passes, even if one call is slow).
func (r Result) Fallback(max time.Duration) time.Duration {
	d := max
	if lim := r.waiterTTL / 3; lim > 0 && lim < d {
		d = lim
	}
	if r.Position == 1 && r.LockTTL > 0 && r.LockTTL+time.Millisecond < d {
		d = r.LockTTL + time.Millisecond
	}
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d
}

// Sharded reports whether wake-ups on rdb go by sharded Pub/Sub (SPUBLISH,
// SSUBSCRIBE): true for a *redis.ClusterClient, which needs Redis 7.
func Sharded(rdb any) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// flag is a script's boolean argument; a constant boxed costs no
// allocation.
func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// ErrReply is a script reply of an unexpected shape.
var ErrReply = errors.New("fifo: unexpected script reply")

// Acquire takes req.Key for req.Token if the lock is free and the token is
// at the head of the key's queue (or the queue is empty); otherwise it puts
// the token in the queue, or refreshes its deadline there, in the same
// script, one round trip, sent at most once (rediswire.RunOnce: go-redis
// never re-sends it after it may have reached the server). rdb is any
// go-redis client; on a
// *redis.ClusterClient wake-ups are published with SPUBLISH, and the key
// must have a hash tag.
//
// After an error the token may or may not hold the lock and may or may not
// be queued: call Leave (or Release), which undoes both.
func Acquire(ctx context.Context, rdb rediswire.Processor, req *Request) (Result, error) {
	key, waiterTTL := req.Key, req.WaiterTTL
	if req.TTL < time.Millisecond || waiterTTL < time.Millisecond {
		return Result{}, fmt.Errorf("fifo: TTL %v and WaiterTTL %v must be at least 1ms", req.TTL, waiterTTL)
	}
	if !holder.ValidToken(req.Token) || strings.ContainsAny(req.Holder, "|;") {
		return Result{}, fmt.Errorf("fifo: token %q must be non-empty without ';', and the holder description %q hold no '|' or ';'", req.Token, req.Holder)
	}
	sharded := Sharded(rdb)
	if sharded && policy.HashTag(key) == key {
		return Result{}, fmt.Errorf("fifo: key %q has no hash tag: on a Cluster its queue and channel would land in other slots", key)
	}
	suffixes := queueSuffixes
	if req.Fencing {
		suffixes = queueFenceSuffixes
	}
	names := namesOf(key)
	var wake any
	if req.Wake == "" && req.Notifier != nil {
		wake = req.Notifier.wakeOf(key).arg
	} else {
		wake = req.Wake
	}
	v, err := rediswire.RunArgs(ctx, rdb, acquireScript, acquireSrc, names.command(len(suffixes),
		names.keepToken(req.Token), rediswire.Int(req.TTL.Milliseconds()), rediswire.Int(waiterTTL.Milliseconds()),
		wake, flag(sharded), textArg(req.Holder))).Slice()
	if err != nil {
		return Result{}, rediswire.FenceError(err, keysOf(key, suffixes...))
	}
	r := Result{waiterTTL: waiterTTL}
	if len(v) != 4 {
		return r, fmt.Errorf("%w: %v", ErrReply, v)
	}
	a, ok1 := v[0].(int64)
	b, ok2 := v[1].(int64)
	if s, ok := v[1].(string); ok { // a fence past 2^53 is decimal text (policy.NextFenceLua)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil && req.Fencing {
			return Result{}, rediswire.BadCounter(policy.FenceKey(key), fmt.Sprintf("it holds %q", s))
		}
		b, ok2 = n, err == nil
	}
	if !ok1 || !ok2 {
		return r, fmt.Errorf("%w: %v", ErrReply, v)
	}
	if a == 1 || a == 2 {
		r.Granted, r.Fence, r.Earlier = true, b, a == 2
		r.Previous, _ = v[2].(string)
		if ms, ok := v[3].(int64); ok && ms > 0 {
			r.LockTTL = time.Duration(ms) * time.Millisecond
		}
		return r, nil
	}
	pos, ok := v[2].(int64)
	if !ok {
		return r, fmt.Errorf("%w: %v", ErrReply, v)
	}
	r.Position = int(pos)
	if s, ok := v[3].(string); ok {
		r.Joined, _ = strconv.ParseInt(s, 10, 64)
	}
	switch {
	case b >= 0:
		r.LockTTL = time.Duration(b) * time.Millisecond
	case b == -1:
		r.LockTTL = -1
	}
	return r, nil
}

// Release deletes key if it holds token (held reports whether it did; a
// lock that holds another token is left alone), takes token out of the
// queue, and, when the lock is free, hands it over to the waiter at the
// head and publishes the grant on its client's channel; when that waiter is
// in this process, it hands it the grant itself too, at once (deliverLocal).
// prev, when not "", is the releaser's trace context, left for the next
// holder (Result.Previous) for as long as the queue lives. Like Acquire, it
// is sent at most once: a re-sent release would find the lock gone (or
// handed over) and report a loss.
func Release(ctx context.Context, rdb rediswire.Processor, key, token, prev string) (held bool, err error) {
	names := namesOf(key)
	v, err := rediswire.RunArgs(ctx, rdb, releaseScript, releaseSrc,
		names.command(len(queueFenceSuffixes), names.tokenArg(token), flag(Sharded(rdb)), prev)).Result()
	if err != nil {
		return false, err
	}
	switch v := v.(type) {
	case int64:
		return v == 1, nil
	case []any:
		// A handover: its channel and message, for a waiter in this
		// process (deliverLocal).
		if len(v) != 3 {
			break
		}
		n, ok1 := v[0].(int64)
		ch, ok2 := v[1].(string)
		msg, ok3 := v[2].(string)
		if ok1 && ok2 && ok3 {
			deliverLocal(ch, msg)
			return n == 1, nil
		}
	}
	return false, fmt.Errorf("%w: %v", ErrReply, v)
}

// The keys of the scripts, after the lock key: Acquire's without fencing,
// and Acquire's with fencing, which are also Release's. Each is a prefix of
// keySuffixes, the order of the names a keyNames boxes.
var (
	keySuffixes        = [...]string{QueueSuffix, DeadlinesSuffix, PreviousSuffix, WaitersSuffix, FenceSuffix}
	queueSuffixes      = keySuffixes[:4]
	queueFenceSuffixes = keySuffixes[:5]
)

// keysOf is key followed by key+suffix for each suffix.
func keysOf(key string, suffixes ...string) []string {
	all := derived(key, suffixes)
	keys := make([]string, 1, 1+len(suffixes))
	keys[0] = key
	for _, s := range suffixes {
		keys = append(keys, all[:len(key)+len(s)])
		all = all[len(key)+len(s):]
	}
	return keys
}

// scriptArgs is the command rediswire.RunArgs sends for a script on key:
// its keys, key and key+suffix for each suffix, then args. suffixes must be
// a prefix of keySuffixes, as every script's are: the keys come boxed from
// namesOf, so that the only allocation is the command's slice.
func scriptArgs(key string, suffixes []string, args ...any) []any {
	if len(suffixes) > len(keySuffixes) || !slices.Equal(suffixes, keySuffixes[:len(suffixes)]) {
		panic(fmt.Sprintf("fifo: script keys %q are not a prefix of %q", suffixes, keySuffixes))
	}
	return namesOf(key).command(len(suffixes), args...)
}

// derived is key+suffix for each suffix, concatenated: one allocation for
// the names a script derives from key.
func derived(key string, suffixes []string) string {
	n := 0
	for _, s := range suffixes {
		n += len(key) + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range suffixes {
		b.WriteString(key)
		b.WriteString(s)
	}
	return b.String()
}

// Leave takes token out of key's queue and, when the lock is free, hands it
// over to the waiter now at the head. It is Release without a trace context: if
// the lock holds token (a grant whose reply was lost), it is released too,
// since a token that leaves has given up on its acquisition.
func Leave(ctx context.Context, rdb rediswire.Processor, key, token string) error {
	_, err := Release(ctx, rdb, key, token, "")
	return err
}
