// Package policy owns every rule about a lock domain that more than one part
// of lockkit needs: the defaults, the validation rules, the key layout and the
// name of the TTL override variable. The schema (when it checks lockkit.yaml),
// the generator (when it writes a DomainSpec) and the runtime (when it binds a
// domain) all ask this package, so a rule is written once.
//
// The checks return plain messages without a position or a field path; the
// caller says where (a file:line:col in the schema, a domain name or an
// environment variable at run time).
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults.
const (
	// DefaultPrefix starts every key of a domain that sets no prefix.
	DefaultPrefix = "lock:"
	// DefaultCommandTimeout bounds each backend command of a lock operation.
	DefaultCommandTimeout = 500 * time.Millisecond
	// DefaultReplicaTimeout bounds the wait for replicas (Redis WAIT).
	DefaultReplicaTimeout = 50 * time.Millisecond

	DefaultInitialInterval = 50 * time.Millisecond
	DefaultMaxInterval     = time.Second
	DefaultMultiplier      = 2.0
	DefaultJitter          = 0.5
)

// MinTTL is the shortest TTL a lease may have. Below it the drift allowance
// (Drift) leaves too little of the lease to be worth granting: a 2ms TTL is
// all drift, and every acquisition would be refused as too late.
const MinTTL = 10 * time.Millisecond

// Drift is how much less than its TTL a lease is trusted on the holder's
// clock: clocks run at slightly different rates, and the server's countdown
// starts after the request left. 1% of the TTL plus 2ms, as Redlock has it.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// DefaultRenew is the renew interval of a domain that sets none: ttl/3.
func DefaultRenew(ttl time.Duration) time.Duration { return ttl / 3 }

// CheckTTL reports a TTL that cannot work: not positive, not a whole number
// of milliseconds (Redis counts PX in milliseconds), or shorter than MinTTL.
func CheckTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("ttl must be > 0 (got %v)", ttl)
	case ttl%time.Millisecond != 0:
		return fmt.Errorf("ttl must be a whole number of milliseconds (got %v; such as %v)", ttl, max(ttl.Round(time.Millisecond), MinTTL))
	case ttl < MinTTL:
		return fmt.Errorf("ttl must be at least %v (got %v): the drift allowance of 1%% + 2ms would leave too little of the lease", MinTTL, ttl)
	}
	return nil
}

// CheckStoreTTL reports a TTL that a backend's store cannot keep: under its
// minimum, not a whole number of its TTL unit, or over its maximum (each 0
// when the store has no such limit), naming the backend and the limit.
func CheckStoreTTL(ttl time.Duration, backend string, minTTL, unit, maxTTL time.Duration) error {
	switch {
	case ttl <= 0:
		return nil // CheckTTL's
	case minTTL > 0 && ttl < minTTL:
		return fmt.Errorf("ttl %v is under the %s backend's minimum %v", ttl, backend, minTTL)
	case unit > 0 && ttl%unit != 0:
		return fmt.Errorf("ttl %v is not a whole number of the %s backend's TTL unit %v (such as %v)", ttl, backend, unit, max(ttl.Round(unit), minTTL, unit))
	case maxTTL > 0 && ttl > maxTTL:
		return fmt.Errorf("ttl %v is over the %s backend's maximum %v", ttl, backend, maxTTL)
	}
	return nil
}

// CheckRenew reports a renew interval that cannot keep a lease of ttl
// alive: the renewal must be sent and answered before the lease's local
// deadline (ttl − Drift), allowing cmdTimeout for the answer. A renew < 0
// means never renew, and is fine. The schema, which cannot know the client's
// command timeout, passes 0; the runtime checks again with its own.
func CheckRenew(ttl, renew, cmdTimeout time.Duration) error {
	if renew < 0 || ttl <= 0 {
		return nil
	}
	if renew == 0 {
		return errors.New("renew interval must be > 0, or < 0 to never renew")
	}
	room := ttl - Drift(ttl) - cmdTimeout
	if renew <= room {
		return nil
	}
	if cmdTimeout > 0 && room <= 0 {
		return fmt.Errorf("renew interval %v cannot keep a %v lease: its local deadline (ttl − drift %v) comes before a renewal could even be answered within the command timeout %v; use a longer ttl or a shorter command timeout",
			renew, ttl, Drift(ttl), cmdTimeout)
	}
	if cmdTimeout > 0 {
		return fmt.Errorf("renew interval %v leaves no room to renew a %v lease: a renewal sent then, answered within the command timeout %v, would land after the lease's local deadline (ttl − drift %v); renew at most every %v, or use a longer ttl or a shorter command timeout",
			renew, ttl, cmdTimeout, Drift(ttl), max(room, 0).Truncate(time.Millisecond))
	}
	return fmt.Errorf("renew interval %v leaves no room to renew a %v lease before its local deadline (ttl − drift %v = %v); renew at most every %v, ideally ttl/3",
		renew, ttl, Drift(ttl), ttl-Drift(ttl), (ttl / 3).Truncate(time.Millisecond))
}

// CheckRenewMargin reports a renew interval that CheckRenew accepts but
// that leaves no room for a second try: a renewal sent at the renew
// interval that times out (after cmdTimeout) must leave time for one more,
// answered within cmdTimeout, before the lease's local deadline:
//
//	ttl − drift − renew ≥ 2 × cmdTimeout
//
// A client whose process is CPU-throttled or whose link is slow sees such
// timeouts with Redis healthy, and then loses leases (docs/deployments.md,
// "CPU limits"). The runtime logs this as a warning, not an error.
func CheckRenewMargin(ttl, renew, cmdTimeout time.Duration) error {
	if renew <= 0 || ttl <= 0 || cmdTimeout <= 0 {
		return nil
	}
	room := ttl - Drift(ttl) - renew
	if room >= 2*cmdTimeout {
		return nil
	}
	// The shortest TTL that passes at the same renew share of the TTL:
	// ttl × (0.99 − renew/ttl) ≥ 2 × cmdTimeout + 2ms.
	share := 0.99 - float64(renew)/float64(ttl)
	advice := "use a shorter renew interval or command timeout"
	if share > 0 {
		need := time.Duration(float64(2*cmdTimeout+2*time.Millisecond) / share)
		advice = fmt.Sprintf("use a ttl of at least %v at this renew share, or a shorter command timeout", need.Truncate(100*time.Millisecond)+100*time.Millisecond)
	}
	return fmt.Errorf("ttl %v with renew interval %v leaves %v between a renewal and the lease's local deadline, less than two command timeouts (2 × %v): a renewal that times out leaves no time for another, so a slow or CPU-throttled client loses leases while the server is healthy; %s",
		ttl, renew, room, cmdTimeout, advice)
}

// CheckMultiplier reports a backoff multiplier that is not a finite number >= 1.
func CheckMultiplier(m float64) error {
	if !(m >= 1) || math.IsInf(m, 0) {
		return fmt.Errorf("multiplier must be a finite number >= 1 (got %v), or backoffs would shrink or vanish", m)
	}
	return nil
}

// CheckJitter reports a jitter that is not in (0, 1]. It cannot be 0:
// contenders without jitter retry in lockstep.
func CheckJitter(j float64) error {
	if !(j > 0 && j <= 1) {
		return fmt.Errorf("jitter must be above 0 and at most 1 (got %v): the fraction by which each backoff is randomized, such as 0.5", j)
	}
	return nil
}

// CheckReplicaTimeout reports a wait for replicas that could outlast the lease.
func CheckReplicaTimeout(ttl, wait time.Duration) error {
	switch {
	case wait < 0:
		return fmt.Errorf("replica timeout must be >= 0 (got %v)", wait)
	case wait%time.Millisecond != 0:
		return fmt.Errorf("replica timeout must be a whole number of milliseconds, as Redis WAIT counts them (got %v)", wait)
	case ttl > 0 && wait >= ttl:
		return fmt.Errorf("replica timeout %v must be shorter than the ttl %v, or the lease could expire while the acquisition waits for replicas", wait, ttl)
	}
	return nil
}

// EnvTTLPrefix starts the environment variables that override a domain's TTL
// at run time: LOCKKIT_TTL_<NAME>=<Go duration>.
const EnvTTLPrefix = "LOCKKIT_TTL_"

// EnvName is the variable that overrides domain's TTL: EnvTTLPrefix and the
// domain name in upper case, every byte other than A-Z and 0-9 turned into
// '_' (user_digest → LOCKKIT_TTL_USER_DIGEST).
func EnvName(domain string) string {
	b := []byte(strings.ToUpper(domain))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return EnvTTLPrefix + string(b)
}

// The key layout: a lock key is prefix + "{" + suffix + "}". The braces are a
// Redis Cluster hash tag, so every key derived from a lock key (its fence
// counter, its waiter queue) shares the lock's slot.
const (
	TagOpen     = '{'
	TagClose    = '}'
	FenceSuffix = ":fence"
)

// Key is the lock key of suffix (the domain pattern with its parameters
// encoded) under prefix. Key, and AppendKeyOpen with AppendKeyClose for a
// key built in a buffer, are the only places that lay a key out.
func Key(prefix, suffix string) string {
	return string(AppendKeyClose(append(AppendKeyOpen(make([]byte, 0, len(prefix)+len(suffix)+2), prefix), suffix...)))
}

// AppendKeyOpen appends the start of a lock key to dst: prefix and the
// hash tag's opening brace. The suffix follows, then AppendKeyClose.
func AppendKeyOpen(dst []byte, prefix string) []byte {
	return append(append(dst, prefix...), TagOpen)
}

// AppendKeyClose appends the end of a lock key to dst, after its suffix.
func AppendKeyClose(dst []byte) []byte { return append(dst, TagClose) }

// HashTag is the part of key that Redis Cluster hashes: what lies between
// the first '{' and the next '}', when that is not empty, or else the whole
// key. A lock key's tag is its braced suffix.
func HashTag(key string) string {
	if s := strings.IndexByte(key, TagOpen); s >= 0 {
		if e := strings.IndexByte(key[s+1:], TagClose); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// ClusterSlot is key's Redis Cluster hash slot (HASH_SLOT in the Cluster
// specification): CRC16 (XMODEM) of HashTag(key), mod 16384. go-redis
// computes it only in an internal package.
func ClusterSlot(key string) int {
	tag := HashTag(key)
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// FenceKey is the fence counter of the lock at key.
func FenceKey(key string) string { return key + FenceSuffix }

// RedlockMarker is the key where a Redlock node keeps when its current life
// began (its run_id and the server time of its first Redlock acquire since a
// restart or a loss of its data): the node votes for a key only once that
// key's TTL has passed since then (docs/semantics.md, guarantee 1). It never
// expires, and no lock key is ever named so (a lock key ends in '}').
const RedlockMarker = "lockkit:redlock-node"

// RedlockMarkerFor is the marker that the Redlock acquire of key reads: the
// node's one RedlockMarker, or on a Cluster node the marker of key's slot
// (RedlockMarker + ":{tag}", tag any text that hashes to that slot), so
// that a script's keys share a slot.
func RedlockMarkerFor(key string, cluster bool) string {
	if !cluster {
		return RedlockMarker
	}
	slotTagsOnce.Do(func() {
		slotTags = make([]string, 16384)
		for i, left := 0, len(slotTags); left > 0; i++ {
			tag := strconv.Itoa(i)
			if s := ClusterSlot(tag); slotTags[s] == "" {
				slotTags[s], left = tag, left-1
			}
		}
	})
	return RedlockMarker + ":" + string(TagOpen) + slotTags[ClusterSlot(key)] + string(TagClose)
}

var (
	slotTagsOnce sync.Once
	slotTags     []string // slot → the smallest decimal number that hashes to it
)

// PermitSuffix follows a semaphore's key in each of its permit slots.
const PermitSuffix = ":permit:"

// PermitKey is slot i (0 ≤ i < permits) of the semaphore at key: an
// ordinary lock key, after key's hash tag so that every slot shares the
// semaphore's Redis Cluster slot. It ends in a digit, and a lock key ends
// in '}', so no slot is ever another domain's lock.
func PermitKey(key string, i int) string {
	return key + PermitSuffix + strconv.Itoa(i)
}

// CheckPrefix reports a prefix that would move the hash tag.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("prefix %q must not contain '{' or '}': the key's own braces are its Redis Cluster hash tag", prefix)
	}
	return nil
}

// CheckTag reports a lock key's braced suffix (its Redis Cluster hash tag)
// that would split the lock from its fence counter or move the tag: an
// empty one (Redis then hashes the whole key, and key and key+FenceSuffix
// land in different slots) or one with a brace (a literal's '{' or '}'
// would end or start the tag elsewhere). key is the full key, for the error.
func CheckTag(key, tag string) error {
	switch {
	case tag == "":
		return fmt.Errorf("key %q has an empty hash tag %q: Redis Cluster would hash the whole key and put the lock and its fence counter in different slots; give the key a literal or a non-empty parameter", key, "{}")
	case strings.ContainsAny(tag, "{}"):
		return fmt.Errorf("key %q: a literal contains '{' or '}', which would move its Redis Cluster hash tag", key)
	}
	return nil
}

// AppendParam appends the injective, readable encoding of a string key
// parameter to dst: the bytes NeedsEscape names become %XX (upper-case hex),
// everything else, unicode included, is kept. So an encoded parameter never
// contains ':', '{' or '}', and two different strings never encode alike.
func AppendParam(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if NeedsEscape(c) {
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&0xf])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

const upperHex = "0123456789ABCDEF"

// NeedsEscape reports whether a parameter byte is written as %XX: '%', ':',
// '{', '}', every control byte (< 0x20) and DEL (0x7f).
func NeedsEscape(c byte) bool {
	return c < 0x20 || c == 0x7f || c == '%' || c == ':' || c == '{' || c == '}'
}

// NextFenceLua is the fence rule for the scripts that grant a lock: prepend
// it, then next_fence(counter_key, ttl_ms) issues the lock's next fence,
// max(counter + 1, server TIME in µs), and stores it back. The counter alone
// goes back when Redis loses writes (a restart without them, everysec AOF, a
// failover to a replica that missed the last INCRs); the clock does not, so
// fences stay strictly increasing as long as the server clock never steps
// back and grants stay below one per microsecond per key.
//
// The counter expires (FenceKeep): next_fence sets it to expire at the
// moment its fence f stands for, f/1000 ms, plus max(ttl_ms, FenceKeep).
// So once it has expired the server's clock is past f, and a new counter,
// which starts at TIME, issues a fence above every fence before it, as after
// a lost counter. The same rule makes expiry and loss one case. A counter
// is also kept for max(ttl, FenceKeep) after every extend of its lock
// (FenceKeepLua), so a held lock's counter (its fence, read by an
// election's Leader and by FIFO's re-found grant) outlives the lock.
//
// A counter that is no integer (text, another type, or 2^63−1, which INCR
// cannot raise) issues nothing: next_fence returns nil and Redis's error,
// before it writes anything, and the script replies BadFenceLua's error
// (rediswire.FenceError names the key for the caller).
//
// A fence is exact up to 2^63−1. Lua numbers are doubles, exact only below
// 2^53 (fenceExactLua): past it next_fence returns the counter's own decimal
// text, which go-redis reads as the same int64, and the clock (~2^51 today)
// is behind the counter anyway. fence_text(f) writes a fence either way, for
// a message. The Go side of each script reads an integer or a decimal string.
var NextFenceLua = `local function next_fence(counter, ttl)
  local fence = redis.pcall('INCR', counter)
  if type(fence) == 'table' then
    return nil, fence.err or fence.error or 'not an integer'
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence >= ` + fenceExactLua + ` then
    fence = redis.call('GET', counter)
  elseif now > fence then
    fence = now
    redis.call('SET', counter, string.format('%.0f', fence))
  end
  redis.call('PEXPIREAT', counter, string.format('%.0f',
    math.floor(tonumber(fence) / 1000) + math.max(tonumber(ttl) or 0, ` + fenceKeepLua + `)))
  return fence
end
local function fence_text(f)
  if type(f) == 'string' then
    return f
  end
  return string.format('%.0f', f)
end
` + BadFenceLua

// BadFenceLua defines bad_fence(i, why), the error reply of a script that
// met a fence counter (KEYS[i]) it cannot read as one: BadFenceCode, i and
// Redis's error why (rediswire.FenceError reads it).
var BadFenceLua = `local function bad_fence(i, why)
  return redis.error_reply('` + BadFenceCode + ` ' .. i .. ' ' .. why)
end
`

// FenceKeepLua keeps a lock's fence counter for max(ttl_ms, FenceKeep) after
// an extend of the lock (keep_fence(counter_key, ttl_ms)), so it outlives the
// lock it counts for. It only moves an expiry later; a counter without one
// (written by v0.1.0) or missing is left alone.
var FenceKeepLua = `local function keep_fence(counter, ttl)
  local keep = math.max(tonumber(ttl), ` + fenceKeepLua + `)
  local p = redis.call('PTTL', counter)
  if p >= 0 and p < keep then
    redis.call('PEXPIRE', counter, keep)
  end
end
`

// FenceKeep is how long a fence counter is kept, at least, after the moment
// its last fence stands for (and after its lock's last extend), when the
// lock's TTL is shorter: NextFenceLua's expiry rule. It bounds the counters
// Redis keeps to the keys fenced in the last FenceKeep, and it is also how
// far back the server's clock may step after a counter expired without a
// fence repeating (docs/semantics.md, guarantee 3).
const FenceKeep = 10 * time.Minute

// fenceKeepLua is FenceKeep in ms, as Lua reads it.
var fenceKeepLua = strconv.FormatInt(FenceKeep.Milliseconds(), 10)

// BadFenceCode starts the error reply of a script that met a fence counter
// it cannot read as one: BadFenceCode, the counter's index in KEYS
// (1-based), and Redis's own error (rediswire.FenceError).
const BadFenceCode = "LOCKKIT_BADFENCE"

// fenceExactLua is 2^53, where Lua's doubles stop holding every integer: a
// fence at or past it travels as decimal text (NextFenceLua).
const fenceExactLua = "9007199254740992"

// Wait is how a domain's acquisitions wait for a held lock.
type Wait uint8

const (
	// WaitPoll retries with jittered exponential backoff (the retry
	// policy): the default. Whoever retries first after a release wins.
	WaitPoll Wait = iota
	// WaitFIFO queues waiters per key in arrival order and grants the lock
	// to the head only: in Redis, which hands it over on release and wakes
	// the head by push (internal/fifo), or in PostgreSQL's own lock queue
	// (pg_advisory_lock). The retry policy's max_wait and the caller's ctx
	// bound the wait; its backoff fields are not used.
	WaitFIFO
)

// The names of the wait modes in lockkit.yaml.
const (
	WaitPollName = "poll"
	WaitFIFOName = "fifo"
)

func (w Wait) String() string {
	if w == WaitFIFO {
		return WaitFIFOName
	}
	return WaitPollName
}

// ParseWait reads a wait mode's name: "poll" or "fifo".
func ParseWait(s string) (Wait, error) {
	switch s {
	case WaitPollName:
		return WaitPoll, nil
	case WaitFIFOName:
		return WaitFIFO, nil
	}
	return WaitPoll, fmt.Errorf("wait must be %q (retry with backoff, the default) or %q (a fair queue with push wake-up) (got %q)", WaitPollName, WaitFIFOName, s)
}

// CheckWait reports a wait mode that cannot work with the rest of the
// policy. FIFO waits in the queue until the lock is handed over, so:
//   - a wait that may last more than one attempt (attempts > 1) needs a
//     bound, maxWait > 0: attempts bound nothing in a queue (a waiter makes
//     as many checks as wake-ups come), max_wait and ctx do;
//   - replicas > 0 is refused: a release hands the lock over in its own
//     script, and nothing could WAIT for replicas before the waiter starts.
func CheckWait(w Wait, attempts int, maxWait time.Duration, replicas int) error {
	if w > WaitFIFO {
		return fmt.Errorf("wait %d is unknown: WaitPoll (poll) or WaitFIFO (fifo)", w)
	}
	if w != WaitFIFO {
		return nil
	}
	var errs []error
	if attempts > 1 && maxWait <= 0 {
		errs = append(errs, errors.New("wait fifo needs retry max_wait > 0: a queued waiter waits for its turn until max_wait or its ctx ends, and attempts bound nothing in a queue (retry none makes one attempt that leaves the queue at once)"))
	}
	if replicas > 0 {
		errs = append(errs, fmt.Errorf("wait fifo cannot wait for replicas (replicas %d): a release hands the lock to the next waiter in its own script, with no WAIT before the waiter starts; use wait poll with replicas, or replicas 0", replicas))
	}
	return errors.Join(errs...)
}

// FIFO waiting's constants (internal/fifo).
const (
	// FIFOWaiterTTL is how long a queued waiter stays in the queue without
	// checking in (its server-side deadline); a dead waiter is pruned after
	// it. A handover gives the lock for min(TTL, FIFOWaiterTTL).
	FIFOWaiterTTL = 2 * time.Second
	// FIFOFallback is the longest a queued waiter waits for a push before
	// it checks again: what a lost push, a resubscription or a failover
	// costs. The head waits at most the lock's remaining TTL.
	FIFOFallback = 200 * time.Millisecond
)

// FIFODeadWaiterBound is the longest a waiter that died while queued can
// hold up the lock after a release: a handover to it keeps the lock for
// min(ttl, FIFOWaiterTTL), then the next head's fallback (FIFOFallback)
// takes it.
func FIFODeadWaiterBound(ttl time.Duration) time.Duration {
	return min(ttl, FIFOWaiterTTL) + FIFOFallback
}

// The kinds of domain (lockkit.yaml's kind). The empty kind is a lock.
const (
	// KindLock is mutual exclusion: one holder per key (the default).
	KindLock = "lock"
	// KindElection is leader election: one leader per term.
	KindElection = "election"
	// KindSemaphore admits at most Permits holders per key at once.
	KindSemaphore = "semaphore"
)

// CheckKind reports a kind that is not one of the three, and permits that
// do not fit the kind: a semaphore needs permits >= 1, and any other kind
// takes none (0). kind "" is a lock.
func CheckKind(kind string, permits int) error {
	switch kind {
	case "", KindLock, KindElection:
		if permits != 0 {
			return fmt.Errorf("permits %d is for kind %s only; this domain is kind %s", permits, KindSemaphore, cmp.Or(kind, KindLock))
		}
	case KindSemaphore:
		return CheckPermits(permits)
	default:
		return fmt.Errorf("kind must be %q (the default), %q or %q (got %q)", KindLock, KindElection, KindSemaphore, kind)
	}
	return nil
}

// CheckPermits reports a semaphore's permits below 1 or above MaxCount.
func CheckPermits(permits int) error {
	if permits < 1 {
		return fmt.Errorf("permits must be at least 1 (got %d): how many holders the semaphore admits at once", permits)
	}
	return CheckCount("permits", int64(permits))
}

// TypeName is the generated type of a domain's keys: its Go name and the
// kind's noun (UserDigestLock, PartnerAPISemaphore). The schema checks the
// name is free; the generator declares it.
func TypeName(goName, kind string) string {
	if kind == KindSemaphore {
		return goName + "Semaphore"
	}
	return goName + "Lock"
}

// EnvPermitsPrefix starts the environment variables that override a
// semaphore's permits at run time: LOCKKIT_PERMITS_<NAME>=<whole number>.
// NAME is spelled as for EnvTTLPrefix.
const EnvPermitsPrefix = "LOCKKIT_PERMITS_"

// EnvPermitsName is the variable that overrides domain's permits.
func EnvPermitsName(domain string) string {
	return EnvPermitsPrefix + strings.TrimPrefix(EnvName(domain), EnvTTLPrefix)
}
