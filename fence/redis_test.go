package fence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// Set's rules: the first write is accepted, a higher or equal fence is
// accepted, a lower one is ErrFenced and leaves the resource as it was.
// Fences compare as integers even where float64 cannot tell them apart.
func TestFencedSet(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	key := "booking:" + t.Name()

	if _, _, err := Get(ctx, rdb, key); !errors.Is(err, redis.Nil) {
		t.Fatalf("FencedGet of a key never written = %v, want redis.Nil", err)
	}
	steps := []struct {
		fence  int64
		accept bool
	}{
		{100, true},                    // first write
		{100, true},                    // same lease, again
		{101, true},                    // newer lease
		{99, false},                    // stale
		{1000, true},                   // longer decimal is larger
		{999, false},                   // shorter is smaller, whatever its digits
		{1 << 53, true},                // 9007199254740992
		{1<<53 + 1, true},              // a float64 rounds it to 1<<53
		{1 << 53, false},               // equal to 1<<53+1 as floats: must still be turned away
		{1<<62 + 12345, true},          // far past float precision
		{1<<62 + 12344, false},         // differs in the last digit only
		{1<<63 - 1, true},              // the largest fence
		{1<<63 - 2, false},             //
		{1_800_000_000_000_000, false}, // a TIME-seeded fence below the stored one
	}
	wantValue, wantFence := "", int64(0)
	for i, s := range steps {
		value := fmt.Sprintf("write %d", i)
		err := Set(ctx, rdb, key, value, s.fence)
		if s.accept {
			if err != nil {
				t.Fatalf("step %d: Set(fence %d) = %v, want accepted", i, s.fence, err)
			}
			wantValue, wantFence = value, s.fence
		} else {
			var fe *Error
			if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) {
				t.Fatalf("step %d: Set(fence %d) = %v, want ErrFenced", i, s.fence, err)
			}
			if fe.Fence != s.fence || fe.Current != wantFence || fe.Resource != key {
				t.Fatalf("step %d: %+v, want fence %d, current %d, resource %s", i, fe, s.fence, wantFence, key)
			}
			for _, part := range []string{key, strconv.FormatInt(s.fence, 10), strconv.FormatInt(wantFence, 10)} {
				if !strings.Contains(err.Error(), part) {
					t.Fatalf("step %d: error %q does not say %q", i, err, part)
				}
			}
		}
		v, f, err := Get(ctx, rdb, key)
		if err != nil || v != wantValue || f != wantFence {
			t.Fatalf("step %d: Get = %q, %d, %v; want %q, %d", i, v, f, err, wantValue, wantFence)
		}
	}

	for _, bad := range []int64{0, -1} {
		if err := Set(ctx, rdb, key, "x", bad); err == nil || errors.Is(err, ErrFenced) {
			t.Fatalf("FencedSet(fence %d) = %v, want an error that is not ErrFenced", bad, err)
		}
	}
	if v, _, _ := Get(ctx, rdb, key); v != wantValue {
		t.Fatalf("an invalid fence changed the value to %q", v)
	}
}

// A resource that is not a Set hash, or whose stored fence is not a
// number, is an error, neither accepted nor ErrFenced.
func TestFencedSetRefusesForeignData(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := Set(ctx, rdb, "str", "v", 5); err == nil || errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("FencedSet on a string key = %v, want WRONGTYPE", err)
	}
	for _, stored := range []string{"abc", "-5", "007", "1e9", ""} {
		rdb.HSet(ctx, "h", "value", "old", "fence", stored)
		err := Set(ctx, rdb, "h", "v", 5)
		if err == nil || errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "not a positive decimal") {
			t.Fatalf("stored fence %q: Set = %v, want an error about the stored fence", stored, err)
		}
		if v := rdb.HGet(ctx, "h", "value").Val(); v != "old" {
			t.Fatalf("stored fence %q: value overwritten with %q", stored, v)
		}
	}
	// The script itself refuses a non-canonical fence, whoever calls it.
	err := fencedSetScript.Run(ctx, rdb, []string{"h2"}, "v", "0012").Err()
	if err == nil || !strings.Contains(err.Error(), "not a positive decimal") {
		t.Fatalf("script with fence 0012 = %v", err)
	}
}
