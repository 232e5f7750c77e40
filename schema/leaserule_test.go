package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
)

// The schema refuses the TTLs and renew intervals the runtime refuses at
// Client.Domain with its default command timeout, in the runtime's words:
// both ask policy.CheckRenew (issue 26: ttl: 600ms generated, then failed
// at New with "renew interval 200ms leaves no room").
func TestParseRefusesWhatTheRuntimeRefuses(t *testing.T) {
	rule := func(ttl, renew time.Duration) string {
		return policy.CheckRenew(ttl, renew, policy.DefaultCommandTimeout).Error()
	}
	for _, tc := range []struct{ name, yaml, at, want string }{
		{"default renew", "domains:\n  - pattern: a\n    ttl: 600ms\n", "f.yaml:5:10:", rule(600*time.Millisecond, 200*time.Millisecond)},
		{"own renew", "domains:\n  - pattern: a\n    ttl: 2s\n    renew: 1800ms\n", "f.yaml:6:12:", rule(2*time.Second, 1800*time.Millisecond)},
		{"shortest ttl", "domains:\n  - pattern: a\n    ttl: 10ms\n", "f.yaml:5:10:", rule(10*time.Millisecond, 3*time.Millisecond+333333)},
		{"in defaults", "defaults: {ttl: 700ms}\ndomains:\n  - pattern: a\n", "f.yaml:3:17:", rule(700*time.Millisecond, 700*time.Millisecond/3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte("version: 1\npackage: p\n"+tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.at) {
				t.Fatalf("Parse = %v\nwant an error at %s containing the runtime's %q", err, tc.at, tc.want)
			}
		})
	}
	// What the runtime accepts, the schema accepts: the shortest TTL that
	// leaves ttl/3 room with the default command timeout, and any ttl that
	// is never renewed.
	for _, y := range []string{"ttl: 770ms", "ttl: 10ms\n    renew: none", "ttl: 1s\n    renew: 480ms"} {
		if _, err := Parse("f.yaml", []byte("version: 1\npackage: p\ndomains:\n  - pattern: a\n    "+y+"\n")); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}
