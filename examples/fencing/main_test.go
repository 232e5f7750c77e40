package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/internal/testserver"
)

// facts checks the narration of one run and returns A's and B's fences.
func facts(t *testing.T, out string) (fenceA, fenceB int64) {
	t.Helper()
	find := func(re string) []string {
		t.Helper()
		m := regexp.MustCompile(`(?m)` + re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the output has no line matching %s:\n%s", re, out)
		}
		return m
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fenceA = num(find(`^A acquired lock:\{table:12\} with fence (\d+)$`)[1])
	fenceB = num(find(`^B acquired lock:\{table:12\} with fence (\d+)$`)[1])
	find(`^B booked the table with fence ` + strconv.FormatInt(fenceB, 10) + `: accepted$`)
	rejected := find(`^A's booking was rejected: .*fence (\d+) is below the resource's fence (\d+)`)
	if num(rejected[1]) != fenceA || num(rejected[2]) != fenceB {
		t.Fatalf("rejection names fences %s and %s, want %d and %d", rejected[1], rejected[2], fenceA, fenceB)
	}
	find(`^booking:table:12 holds "guest B" with fence ` + strconv.FormatInt(fenceB, 10) + `$`)
	return fenceA, fenceB
}

// The example against a real redis-server: the facts hold, B's fence is
// above A's, and a second run on the same server issues higher fences and
// is fenced the same way.
func TestFenceExampleOnRedisServer(t *testing.T) {
	t.Setenv("LOCKKIT_TTL_TABLE", "500ms")
	r := testserver.StartRedis(t)
	var last int64
	for i := range 2 {
		var out bytes.Buffer
		if err := run(t.Context(), &out, &redis.Options{Addr: r.Addr()}); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out.String())
		}
		a, b := facts(t, out.String())
		if b <= a {
			t.Fatalf("run %d: B's fence %d, want above A's %d", i, b, a)
		}
		if a <= last {
			t.Fatalf("run %d: A's fence %d, not above the previous run's %d", i, a, last)
		}
		last = b
		t.Logf("run %d:\n%s", i, out.String())
	}
}

// The example's default mode, the embedded miniredis, runs the same scripts
// (acquire with TIME seeding, the fenced set) under gopher-lua.
func TestFenceExampleOnEmbeddedMiniredis(t *testing.T) {
	t.Setenv("LOCKKIT_TTL_TABLE", "500ms")
	m, err := startMiniredis()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var out bytes.Buffer
	if err := run(t.Context(), &out, &redis.Options{Addr: m.Addr()}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	a, b := facts(t, out.String())
	if b <= a {
		t.Fatalf("B's fence %d, want above A's %d", b, a)
	}
}
