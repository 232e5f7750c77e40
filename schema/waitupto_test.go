package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
)

// "Wait up to D" needs no attempts: a retry mapping with max_wait and no
// attempts (here or in defaults) retries until max_wait, Attempts 0; a FIFO
// domain needs no attempts either (issue 26). A mapping with neither still
// says what to add.
func TestParseRetryMaxWaitWithoutAttempts(t *testing.T) {
	src := `version: 1
package: p
defaults:
  ttl: 10s
domains:
  - pattern: poll
    retry: {max_wait: 5s}
  - pattern: fifo
    wait: fifo
    retry: {max_wait: 5s}
  - pattern: counted
    retry: {attempts: 3, max_wait: 5s}
`
	f, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Retry{
		"poll":    {Attempts: 0, Initial: policy.DefaultInitialInterval, Max: policy.DefaultMaxInterval, Multiplier: policy.DefaultMultiplier, Jitter: policy.DefaultJitter, MaxWait: 5 * time.Second},
		"fifo":    {Attempts: 0, Initial: policy.DefaultInitialInterval, Max: policy.DefaultMaxInterval, Multiplier: policy.DefaultMultiplier, Jitter: policy.DefaultJitter, MaxWait: 5 * time.Second},
		"counted": {Attempts: 3, Initial: policy.DefaultInitialInterval, Max: policy.DefaultMaxInterval, Multiplier: policy.DefaultMultiplier, Jitter: policy.DefaultJitter, MaxWait: 5 * time.Second},
	}
	for _, d := range f.Domains {
		if d.Retry != want[d.Name] || d.Retry.None() {
			t.Errorf("domain %q: retry %+v (none: %v), want %+v", d.Name, d.Retry, d.Retry.None(), want[d.Name])
		}
	}

	_, err = Parse("f.yaml", []byte("version: 1\npackage: p\ndomains:\n  - pattern: a\n    ttl: 1s\n    retry: {initial: 100ms}\n"))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:6:12:") || !strings.Contains(err.Error(), "max_wait") || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("a retry with neither attempts nor max_wait: %v; want an error at 6:12 naming both", err)
	}
}
