package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Error is the error of a write that a resource turned away because of
// its fence. It matches ErrFenced.
type Error struct {
	// Resource names what was written: a Redis key, or a table row.
	Resource string
	// Fence is the fencing number the write carried.
	Fence int64
	// Current is the highest fencing number the resource has accepted,
	// greater than Fence.
	Current int64
}

// Error names the resource and both fences.
func (e *Error) Error() string {
	if e == nil {
		return "lockkit: write fenced off (nil *fence.Error)"
	}
	return fmt.Sprintf("lockkit: write to %s fenced off: fence %d is below the resource's fence %d (a newer lock holder has written)",
		e.Resource, e.Fence, e.Current)
}

// Unwrap makes errors.Is(err, ErrFenced) true.
func (e *Error) Unwrap() error { return ErrFenced }

// Set stores value at key, a Redis hash holding the value and the
// highest fence accepted so far (fields "value" and "fence"), when fence is
// at least that stored fence, and returns nil. When fence is lower, it writes
// nothing and returns a *Error that matches ErrFenced. Check and write
// are one Lua script, so no other write can come between them; the hash is
// one key, so it works on Redis Cluster with any key.
//
// Pass the fence of the lease under which the value was computed
// (Lease.Fence). "At least", not "above": the same lease may write several
// times, and no two leases share a fence (see "Fences" in
// docs/semantics.md: fences stay strictly increasing across restarts, data
// loss and failover, under the clock assumption stated there), so a stale
// holder is turned away either way, once anyone with a newer lease has
// written.
//
// The first write to a key is always accepted. fence must be > 0: a lease of
// a domain without fencing has fence 0, and passing it is an error.
//
// rdb may be a *redis.Client, a Sentinel failover client or a
// *redis.ClusterClient. The resource can live on another Redis than the
// locks: the guarantee comes from comparing numbers at the resource, not
// from where the lock lives.
func Set(ctx context.Context, rdb redis.Scripter, key, value string, fence int64) error {
	if fence <= 0 {
		return fmt.Errorf("lockkit: fenced set %s: fence %d is not a fencing number (> 0); is fencing on for the lock's domain?", key, fence)
	}
	if isNil(rdb) {
		return fmt.Errorf("lockkit: fenced set %s: the Redis client is nil", key)
	}
	res, err := fencedSetScript.Run(ctx, rdb, []string{key}, value, strconv.FormatInt(fence, 10)).Slice()
	if err != nil {
		return fmt.Errorf("lockkit: fenced set %s: %w", key, err)
	}
	if len(res) > 0 && res[0] == int64(1) {
		return nil
	}
	if len(res) == 2 && res[0] == int64(0) {
		if s, ok := res[1].(string); ok {
			current, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("lockkit: fenced set %s: fence %d is below the stored fence %q, which is out of range: %w", key, fence, s, ErrFenced)
			}
			return &Error{Resource: key, Fence: fence, Current: current}
		}
	}
	return fmt.Errorf("lockkit: fenced set %s: unexpected script reply %v", key, res)
}

// fencedGetScript reads a Set resource. A script rather than HMGET so
// that Get needs no more of rdb than Set does (redis.Scripter).
var fencedGetScript = redis.NewScript(`return redis.call('HMGET', KEYS[1], 'value', 'fence')`)

// Get reads what Set stored at key: the value and the fence it
// was written with. A key never written returns an error matching redis.Nil.
func Get(ctx context.Context, rdb redis.Scripter, key string) (value string, fence int64, err error) {
	if isNil(rdb) {
		return "", 0, fmt.Errorf("lockkit: fenced get %s: the Redis client is nil", key)
	}
	res, err := fencedGetScript.Run(ctx, rdb, []string{key}).Slice()
	if err != nil {
		return "", 0, fmt.Errorf("lockkit: fenced get %s: %w", key, err)
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("lockkit: fenced get %s: unexpected script reply %v", key, res)
	}
	f, ok := res[1].(string)
	if !ok {
		// HMGET of a missing key is two nils, which Lua turns into false.
		return "", 0, fmt.Errorf("lockkit: fenced get %s: %w", key, redis.Nil)
	}
	if fence, err = strconv.ParseInt(f, 10, 64); err != nil {
		return "", 0, fmt.Errorf("lockkit: fenced get %s: stored fence %q: %w", key, f, err)
	}
	value, _ = res[0].(string)
	return value, fence, nil
}

// ErrFenced means the protected resource turned a write away because its
// fencing number is lower than one the resource has already accepted: a
// newer lease on the same lock has written since, so this writer's lease
// was lost (it expired while its holder was paused or cut off). Nothing
// was written. Set and Table.Update return it, as an *Error that says the
// resource, the writer's fence and the resource's.
var ErrFenced = errors.New("lockkit: write fenced off: a newer lock holder has written")

var (
	//go:embed fencedset.lua
	fencedSetSrc    string
	fencedSetScript = redis.NewScript(fencedSetSrc)
)

// isNil reports whether v is nil or a typed nil pointer in an interface (a
// nil *redis.Client passed as a redis.Scripter), which would panic on use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
