package testlog

import (
	"strings"
	"testing"
)

// The scan finds a raw key in the forms a log line can quote it, and
// passes the hashed key and lines without a key.
func TestRawKey(t *testing.T) {
	for line, want := range map[string]string{
		`level=WARN msg="lockkit: lease lost" key=lock:{pii:alice@example.com} cause=x`:                "lock:{pii:alice@example.com}",
		`cause="lockkit: lock lost: lock:{pii:alice@example.com}: gone"`:                               "lock:{pii:alice@example.com}",
		`error="zookeeper: delete /lockkit/lock:%7Bpii:bob@example.com%7D/x: node does not exist"`:     "/lockkit/lock:%7Bpii:bob@example.com%7D",
		`level=WARN msg="lockkit: lease lost" key=0123456789abcdef0123456789abcdef cause="lost: 0123"`: "",
		`level=INFO msg="lockkit: circuit breaker state changed" node=127.0.0.1:6379 from=open`:        "",
		`error="zookeeper: delete /lockkit/lock:%7B0123456789abcdef0123456789abcdef%7D/x: gone"`:       "",
		`error="release a: x:{0123456789abcdef0123456789abcdef} b:{k:1}"`:                              "b:{k:1}",
	} {
		got := RawKey(line)
		if got != want {
			t.Errorf("RawKey(%s) = %q, want %q", line, got, want)
		}
	}
	bad, err := RawKeyLines(strings.NewReader("a=1\nkey=lock:{x:1}\nb=2\n"))
	if err != nil || len(bad) != 1 || bad[0] != "key=lock:{x:1}" {
		t.Errorf("RawKeyLines = %q, %v; want the one line with a key", bad, err)
	}
}
