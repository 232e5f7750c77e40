package schema

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
)

// The JSON Schema is for editors, so it restates defaults and limits in its
// own words. internal/policy owns them; this test ties the two together, so
// a changed default or rule fails here until the JSON Schema says the same.
func TestJSONSchemaAgreesWithPolicy(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(JSONSchema(), &doc); err != nil {
		t.Fatal(err)
	}
	// find returns the first object under doc whose key is name.
	var find func(v any, name string) map[string]any
	find = func(v any, name string) map[string]any {
		switch x := v.(type) {
		case map[string]any:
			if m, ok := x[name].(map[string]any); ok {
				if _, ok := m["description"]; ok {
					return m
				}
			}
			for _, c := range x {
				if m := find(c, name); m != nil {
					return m
				}
			}
		case []any:
			for _, c := range x {
				if m := find(c, name); m != nil {
					return m
				}
			}
		}
		return nil
	}
	defaultOf := regexp.MustCompile(`Default:? ([^ .,]+(\.[0-9]+)?)\.`)
	stated := func(name string) string {
		m := find(doc, name)
		if m == nil {
			t.Fatalf("no property %q in the JSON Schema", name)
		}
		d := defaultOf.FindStringSubmatch(m["description"].(string))
		if d == nil {
			t.Fatalf("%s: no default stated in %q", name, m["description"])
		}
		return d[1]
	}
	durations := map[string]time.Duration{
		"initial":         policy.DefaultInitialInterval,
		"max":             policy.DefaultMaxInterval,
		"replica_timeout": policy.DefaultReplicaTimeout,
	}
	for name, want := range durations {
		got, err := time.ParseDuration(stated(name))
		if err != nil || got != want {
			t.Errorf("%s: the JSON Schema states the default %q, the runtime's is %v", name, stated(name), want)
		}
	}
	numbers := map[string]float64{"multiplier": policy.DefaultMultiplier, "jitter": policy.DefaultJitter}
	for name, want := range numbers {
		if got, err := strconv.ParseFloat(stated(name), 64); err != nil || got != want {
			t.Errorf("%s: the JSON Schema states the default %q, the runtime's is %v", name, stated(name), want)
		}
	}
	if got := stated("wait"); got != policy.WaitPoll.String() {
		t.Errorf("wait: the JSON Schema states the default %q, the runtime's is %v", got, policy.WaitPoll)
	}
	if m := find(doc, "wait"); fmt.Sprint(m["enum"]) != fmt.Sprint([]any{policy.WaitPoll.String(), policy.WaitFIFO.String()}) {
		t.Errorf("wait: JSON Schema enum %v, runtime modes %v and %v", m["enum"], policy.WaitPoll, policy.WaitFIFO)
	}
	for _, name := range []string{"poll", "fifo"} {
		if _, err := policy.ParseWait(name); err != nil {
			t.Errorf("wait: the JSON Schema allows %q, the runtime refuses it: %v", name, err)
		}
	}
	if got := stated("renew"); got != "ttl/3" || policy.DefaultRenew(3*time.Second) != time.Second {
		t.Errorf("renew: the JSON Schema states the default %q; the runtime's is ttl/3", got)
	}
	// The limits the JSON Schema can express.
	if m := find(doc, "multiplier"); m["minimum"] != 1.0 || policy.CheckMultiplier(1) != nil || policy.CheckMultiplier(0.99) == nil {
		t.Errorf("multiplier: JSON Schema minimum %v, runtime rule >= 1", m["minimum"])
	}
	if m := find(doc, "jitter"); m["exclusiveMinimum"] != 0.0 || m["maximum"] != 1.0 || policy.CheckJitter(1) != nil || policy.CheckJitter(0) == nil {
		t.Errorf("jitter: JSON Schema (%v, %v], runtime rule (0, 1]", m["exclusiveMinimum"], m["maximum"])
	}
	over := int64(policy.MaxCount) + 1 // as an int: refused on 64-bit targets; below 1 (refused too) on 32-bit ones
	if m := find(doc, "permits"); m["minimum"] != 1.0 || m["maximum"] != float64(policy.MaxCount) || policy.CheckPermits(policy.MaxCount) != nil || policy.CheckPermits(int(over)) == nil || policy.CheckPermits(0) == nil {
		t.Errorf("permits: JSON Schema [%v, %v], runtime rule [1, %d]", m["minimum"], m["maximum"], policy.MaxCount)
	}
	for _, name := range []string{"attempts", "replicas"} {
		if m := find(doc, name); m["maximum"] != float64(policy.MaxCount) || policy.CheckCount(name, policy.MaxCount) != nil || policy.CheckCount(name, policy.MaxCount+1) == nil {
			t.Errorf("%s: JSON Schema maximum %v, runtime rule at most %d", name, m["maximum"], policy.MaxCount)
		}
	}
	if m := find(doc, "prefix"); m["default"] != policy.DefaultPrefix {
		t.Errorf("prefix: JSON Schema default %v, runtime %q", m["default"], policy.DefaultPrefix)
	}
	if ttl := find(doc, "ttl")["description"].(string); !strings.Contains(ttl, "at least "+policy.MinTTL.String()) {
		t.Errorf("ttl: the JSON Schema does not state the minimum %v: %q", policy.MinTTL, ttl)
	}
}
