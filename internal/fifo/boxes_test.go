package fifo

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// namesOf gives every key its own names, more keys than the cache holds
// included (a slot holds the last keys hashed to it, never another's), and
// a key used again is served from the cache.
func TestNamesOfManyKeys(t *testing.T) {
	const n = 4 * (2 << namesBits)
	for round := range 2 {
		for i := range n {
			key := fmt.Sprintf("lock:{k%d}", i)
			e := namesOf(key)
			want := keysOf(key, keySuffixes[:]...)
			got := make([]string, len(e.args))
			for j, a := range e.args {
				got[j], _ = a.(string)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round %d: namesOf(%q) = %q, want %q", round, key, got, want)
			}
			if namesOf(key) != e {
				t.Fatalf("namesOf(%q) made a new entry for a key it had just made", key)
			}
		}
	}
	// As many keys as a set holds are all kept, used in turn; one more
	// pushes out the oldest.
	set := func(k string) uint64 { return maphash.String(cacheSeed, k) >> (64 - names.bits) }
	keys := []string{"lock:{a}"}
	for i := 0; len(keys) < cacheWays+1; i++ {
		if k := fmt.Sprintf("lock:{b%d}", i); set(k) == set(keys[0]) {
			keys = append(keys, k)
		}
	}
	var es []*keyNames
	for _, k := range keys[:cacheWays] {
		es = append(es, namesOf(k))
	}
	for round := range 3 {
		for i, k := range keys[:cacheWays] {
			if namesOf(k) != es[i] {
				t.Fatalf("round %d: %d keys of one set push each other out", round, cacheWays)
			}
		}
	}
	namesOf(keys[cacheWays])
	if namesOf(keys[0]) == es[0] {
		t.Fatalf("a set kept %d keys", cacheWays+1)
	}
}

// A command on a cached key allocates its slice only; a token Acquire
// boxed is not boxed again for the Release.
func TestCommandAllocations(t *testing.T) {
	key := "lock:{allocs}"
	e := namesOf(key)
	e.keepToken("tok")
	if n := testing.AllocsPerRun(100, func() {
		e := namesOf(key)
		_ = e.command(len(queueFenceSuffixes), e.tokenArg("tok"), flag(true), textArg("h=a&p=1"))
	}); n != 1 {
		t.Fatalf("%v allocations for a release's command, want 1 (its slice)", n)
	}
	if v := e.tokenArg("other"); v != any("other") {
		t.Fatalf("tokenArg(other) = %v", v)
	}
}

// What go-redis and its hooks see of a FIFO command: every key, the token,
// the channel and the holder description are strings, and Cmd.String()
// shows them as they are.
func TestCommandsAsHooksSeeThem(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	rec := &recordHook{}
	rdb.AddHook(rec)
	ctx := tctx(t, 10*time.Second)
	n := NewNotifier(rdb, NotifierOptions{})
	defer n.Close()
	key, tok := "lock:{hooks}", newToken()
	if r, err := Acquire(ctx, rdb, &Request{Key: key, Token: tok, Holder: "h=a&p=1", TTL: time.Second, WaiterTTL: time.Second, Fencing: true, Notifier: n}); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	if held, err := Release(ctx, rdb, key, tok, ""); err != nil || !held {
		t.Fatal(held, err)
	}
	want := [][]any{
		{key, key + QueueSuffix, key + DeadlinesSuffix, key + PreviousSuffix, key + WaitersSuffix, key + FenceSuffix, tok, int64(1000), int64(1000), n.Channel(key), "0", "h=a&p=1"},
		{key, key + QueueSuffix, key + DeadlinesSuffix, key + PreviousSuffix, key + WaitersSuffix, key + FenceSuffix, tok, "0", ""},
	}
	cmds := rec.evals()
	if len(cmds) != len(want) {
		t.Fatalf("%d scripts sent, want %d: %v", len(cmds), len(want), cmds)
	}
	for i, c := range cmds {
		args := c.Args()
		if args[2] != 6 || !slices.Equal(args[3:], want[i]) {
			t.Fatalf("script %d sent %#v, want keys and arguments %#v", i, args, want[i])
		}
		s := c.String()
		for _, w := range want[i] {
			if str, ok := w.(string); ok && !strings.Contains(s, str) {
				t.Fatalf("script %d prints as %q, without %q", i, s, str)
			}
		}
	}
}

type recordHook struct {
	mu   sync.Mutex
	cmds []redis.Cmder
}

func (h *recordHook) evals() []redis.Cmder {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []redis.Cmder
	for _, c := range h.cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			if len(out) > 0 && out[len(out)-1].Name() == "evalsha" && n == "eval" {
				out = out[:len(out)-1] // NOSCRIPT: the EVAL is the one that ran
			}
			out = append(out, c)
		}
	}
	return out
}

func (h *recordHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *recordHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.cmds = append(h.cmds, cmd)
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *recordHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
