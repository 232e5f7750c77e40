package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/redis/go-redis/v9"
)

// MaxWaiters bounds the FIFO waiters listed per lock (Lock.Waiters); Lock.Queue
// still counts them all.
const MaxWaiters = 20

// Waiter is one FIFO waiter of a lock, as the queue keys record it
// (docs/wire.md, "FIFO domains"). JSON field names are stable.
type Waiter struct {
	// Position is the waiter's place in the queue: 1 is the head, the next
	// to be granted.
	Position int `json:"position"`
	// Token is the waiter's lease token (its member in key:q).
	Token string `json:"token"`
	// WaitedMillis is how long the waiter has been queued, by the server's
	// clock: TIME minus its join order in key:q (server µs at joining).
	WaitedMillis int64 `json:"waited_ms"`
	// Holder is the holder description the waiter queued with (key:qc), the
	// one it will hold the lock with; nil when it has none.
	Holder *Holder `json:"holder,omitempty"`
}

// readWaiters reads the first MaxWaiters waiters of each lock of a page
// that has a queue: one pipeline of TIME and ZRANGE key:q 0 MaxWaiters-1
// WITHSCORES, then one of HMGET key:qc on the tokens read (not HGETALL: the
// hash holds every waiter). A queue that changed in between only misses
// descriptions.
func readWaiters(ctx context.Context, rdb redis.Cmdable, node string, locks []Lock) error {
	var idx []int
	for i := range locks {
		if locks[i].Queue > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	ranges := make([]*redis.ZSliceCmd, len(idx))
	for j, i := range idx {
		ranges[j] = pipe.ZRangeWithScores(ctx, locks[i].Key+fifo.QueueSuffix, 0, MaxWaiters-1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) && !isRedirect(err) {
		return fmt.Errorf("reading queues on %s: %w", nodeName(node), err)
	}
	t, err := now.Result()
	if err != nil {
		return fmt.Errorf("TIME on %s: %w", nodeName(node), err)
	}
	nowMicros := t.UnixMicro()
	pipe = rdb.Pipeline()
	descs := make([]*redis.SliceCmd, len(idx))
	for j, i := range idx {
		zs, err := ranges[j].Result()
		if err != nil || len(zs) == 0 {
			continue
		}
		toks := make([]string, len(zs))
		for k, z := range zs {
			toks[k], _ = z.Member.(string)
			w := Waiter{Position: k + 1, Token: toks[k], WaitedMillis: (nowMicros - int64(z.Score)) / 1000}
			if w.WaitedMillis < 0 {
				w.WaitedMillis = 0 // joined "in the future": the order was raised past the clock
			}
			locks[i].Waiters = append(locks[i].Waiters, w)
		}
		descs[j] = pipe.HMGet(ctx, locks[i].Key+fifo.WaitersSuffix, toks...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) && !isRedirect(err) {
		return fmt.Errorf("reading queues on %s: %w", nodeName(node), err)
	}
	for j, i := range idx {
		if descs[j] == nil {
			continue
		}
		vs, err := descs[j].Result()
		if err != nil {
			continue
		}
		for k, v := range vs {
			s, ok := v.(string)
			if !ok || k >= len(locks[i].Waiters) {
				continue
			}
			locks[i].Waiters[k].Holder = waiterHolder(locks[i].Waiters[k].Token, s)
		}
	}
	return nil
}

// waiterHolder decodes the description of a key:qc entry,
// "channel|lock TTL ms|waiter TTL ms|fencing|description".
func waiterHolder(token, entry string) *Holder {
	parts := strings.SplitN(entry, "|", 5)
	if len(parts) < 5 || parts[4] == "" {
		return nil
	}
	_, h, _ := holder.Decode(holder.Value(token, parts[4]))
	if h.IsZero() {
		return nil
	}
	return &Holder{Host: h.Host, PID: h.PID, Owner: h.Owner, TraceID: h.TraceID}
}

// waitersText is the table's line for a lock's queue.
func waitersText(l Lock) string {
	var b []string
	for _, w := range l.Waiters {
		who := "token " + show(truncate(w.Token, 8))
		if w.Holder != nil {
			who = holderText(Lock{Holder: w.Holder, Token: w.Token})
		}
		b = append(b, strconv.Itoa(w.Position)+". "+who+" waited "+ttlText(w.WaitedMillis))
	}
	if more := l.Queue - int64(len(l.Waiters)); more > 0 {
		b = append(b, fmt.Sprintf("(+%d more)", more))
	}
	return strings.Join(b, ", ")
}
