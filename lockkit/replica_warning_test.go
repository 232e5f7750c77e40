package lockkit

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReplicaWarning: on a Sentinel failover client, a fencing domain with
// no replicas logs one warning naming the domain (once, however often it is
// bound); a domain with replicas, one without fencing, a silenced one, and
// the same domain on a plain client log none.
func TestReplicaWarning(t *testing.T) {
	testserver.RequireSentinel(t)
	primary := testserver.StartRedis(t)
	sen := testserver.StartSentinel(t, primary, "locks", 1)
	fenced := Policy{TTL: time.Second, Fencing: true}
	for _, c := range []struct {
		name      string
		sentinel  bool
		opts      []Option
		domain    string
		policy    Policy
		wantWarns int
	}{
		{"sentinel, fencing, no replicas", true, nil, "table", fenced, 1},
		{"sentinel, replicas set", true, nil, "table", Policy{TTL: time.Second, Fencing: true, Replicas: 1}, 0},
		{"sentinel, no fencing", true, nil, "report", Policy{TTL: time.Second}, 0},
		{"sentinel, silenced", true, []Option{WithoutReplicaWarning("table")}, "table", fenced, 0},
		{"plain client", false, nil, "table", fenced, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			opts := append([]Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}, c.opts...)
			rdb := primary.Client(t)
			if c.sentinel {
				rdb = sen.FailoverClient(t)
			}
			cl, err := New(goredis.New(rdb), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close(t.Context())
			for range 3 { // bound three times: warned once
				if d := cl.Domain(DomainSpec{Name: c.domain, Policy: c.policy}); d.Err() != nil {
					t.Fatal(d.Err())
				}
			}
			got := strings.Count(logs.String(), "sets no replicas")
			if got != c.wantWarns {
				t.Fatalf("%d warnings, want %d:\n%s", got, c.wantWarns, logs.String())
			}
			if got > 0 && (!strings.Contains(logs.String(), "domain="+c.domain) || !strings.Contains(logs.String(), `deployment="Redis Sentinel"`)) {
				t.Errorf("the warning does not name the domain and deployment:\n%s", logs.String())
			}
		})
	}
}

// TestReplicaWarningCluster: the same warning on a Cluster client.
func TestReplicaWarningCluster(t *testing.T) {
	testserver.RequireRedisCLI(t)
	cl := testserver.StartCluster(t, 3)
	var logs syncBuffer
	c, err := New(goredis.New(cl.Client(t)), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	c.Domain(DomainSpec{Name: "table", Policy: Policy{TTL: time.Second, Fencing: true}})
	if !strings.Contains(logs.String(), "sets no replicas") || !strings.Contains(logs.String(), `deployment="Redis Cluster"`) {
		t.Fatalf("no Cluster warning:\n%s", logs.String())
	}
}
