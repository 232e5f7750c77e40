package main

import (
	"regexp"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
)

// Against a real redis-server: job-42 is delivered three times, twice at
// once, and processed once.
func TestWorkerOnRedis(t *testing.T) {
	out := exampletest.OnRedis(t, "lockkit-example-worker", run)
	exampletest.CheckRealRedis(t, out)
	checkWorker(t, out)
}

// With REDIS_URL unset: the embedded miniredis, announced in one line, and
// the same facts.
func TestWorkerEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-worker", run)
	exampletest.CheckEmbeddedNotice(t, out)
	checkWorker(t, out)
}

var (
	gotRE      = regexp.MustCompile(`(?m)worker-\d  got job-42$`)
	processRE  = regexp.MustCompile(`(?m)worker-\d  acquired lock:\{job:job-42\}; not in the processed record: processing`)
	skipHeldRE = regexp.MustCompile(`(?m)worker-\d  skipped: being processed `)
	skipDoneRE = regexp.MustCompile(`(?m)worker-\d  acquired lock:\{job:job-42\}; skipped: already processed `)
	resultRE   = regexp.MustCompile(`result: job-42 delivered 3 times, processed once \(1 charge\)`)
)

func checkWorker(t *testing.T, out string) {
	t.Helper()
	if n := len(gotRE.FindAllString(out, -1)); n != 3 {
		t.Errorf("job-42 delivered %d times, want 3", n)
	}
	if n := len(processRE.FindAllString(out, -1)); n != 1 {
		t.Errorf("job-42 processed %d times, want once", n)
	}
	held, done := len(skipHeldRE.FindAllString(out, -1)), len(skipDoneRE.FindAllString(out, -1))
	if held+done != 2 || done < 1 {
		t.Errorf("%d deliveries skipped as being processed and %d as already processed; want 2 skips, the last one by the record", held, done)
	}
	if !resultRE.MatchString(out) {
		t.Errorf("no result line saying job-42 was processed once")
	}
}
