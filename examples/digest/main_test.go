package main

import (
	"regexp"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
)

// Against a real redis-server: the hourly job runs once across the three
// replicas, the others skip it, and user 9182 gets one digest email.
func TestDigestOnRedis(t *testing.T) {
	out := exampletest.OnRedis(t, "lockkit-example-digest", run)
	exampletest.CheckRealRedis(t, out)
	checkDigest(t, out)
}

// With REDIS_URL unset: the embedded miniredis, announced in one line, and
// the same facts.
func TestDigestEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-digest", run)
	exampletest.CheckEmbeddedNotice(t, out)
	checkDigest(t, out)
}

var (
	ranRE      = regexp.MustCompile(`(?m)replica-\d  acquired lock:\{cron:digest:(\d+)\}; runs the digest job for hour (\d+)$`)
	heldRE     = regexp.MustCompile(`(?m)replica-\d  skipped: another replica holds cron digest for hour (\d+)$`)
	lateRE     = regexp.MustCompile(`(?m)replica-\d  acquired lock:\{cron:digest:\d+\}; skipped: hour (\d+) already done by replica-\d$`)
	sentRE     = regexp.MustCompile(`(?m)worker-\d   acquired lock:\{user:9182:digest\}; sends the digest email$`)
	userSkipRE = regexp.MustCompile(`(?m)worker-\d   skipped: another worker is sending user 9182's digest$`)
)

func checkDigest(t *testing.T, out string) {
	t.Helper()
	ran := ranRE.FindAllStringSubmatch(out, -1)
	if len(ran) != 1 {
		t.Fatalf("the hourly job ran %d times, want once", len(ran))
	}
	hour := ran[0][2]
	if ran[0][1] != hour {
		t.Errorf("the lock key's hour %s is not the job's hour %s", ran[0][1], hour)
	}
	held := heldRE.FindAllStringSubmatch(out, -1)
	if len(held) != 2 {
		t.Errorf("%d replicas skipped the job as held, want 2", len(held))
	}
	for _, m := range held {
		if m[1] != hour {
			t.Errorf("a replica skipped hour %s, want %s", m[1], hour)
		}
	}
	if m := lateRE.FindStringSubmatch(out); m == nil || m[1] != hour {
		t.Errorf("the late firing did not skip hour %s as done", hour)
	}
	if n := len(sentRE.FindAllString(out, -1)); n != 1 {
		t.Errorf("user 9182's digest was sent %d times, want once", n)
	}
	if n := len(userSkipRE.FindAllString(out, -1)); n != 1 {
		t.Errorf("%d workers skipped user 9182's digest, want 1", n)
	}
}
