package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

const schemaFile = "../../internal/inspect/testdata/lockkit.yaml"

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func runCmd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(tctx(t), args, func(k string) string { return env[k] }, &o, &e)
	return code, o.String(), e.String()
}

func TestUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\npackage: locks\ndomains:\n  - pattern: \"{a}{b}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url := map[string]string{"REDIS_URL": "redis://127.0.0.1:1"}
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		want string
	}{
		{nil, nil, 2, "usage: lockkit <command>"},
		{nil, []string{"inspekt"}, 2, `unknown command "inspekt"`},
		{nil, []string{"inspect", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{url, []string{"inspect", "-config", schemaFile, "extra"}, 2, `unexpected argument "extra"`},
		{url, []string{"inspect", "-config", schemaFile, "-param", "id"}, 2, `want NAME=VALUE, got "id"`},
		{url, []string{"inspect", "-config", schemaFile, "-param", "id=1", "-param", "id=2"}, 2, "parameter id given twice"},
		{nil, []string{"inspect", "-config", schemaFile, "-redis-url", "redis://x:1", "-cluster", "a:1"}, 2, "give one address"},
		{nil, []string{"inspect", "-config", schemaFile, "-sentinel", "a:1"}, 2, "-sentinel needs -master NAME"},
		{url, []string{"inspect", "-config", schemaFile, "-master", "m"}, 2, "-master goes with -sentinel"},
		{nil, []string{"inspect", "-config", schemaFile}, 2, "no Redis address: set REDIS_URL"},
		{map[string]string{"REDIS_URL": "http://x"}, []string{"inspect", "-config", schemaFile}, 2, "REDIS_URL: redis: invalid URL scheme: http"},
		{url, []string{"inspect", "-config", schemaFile, "-count", "2"}, 2, "-count needs -watch"},
		{url, []string{"inspect", "-config", schemaFile, "-limit", "0"}, 2, "-limit must be > 0"},
		{url, []string{"inspect", "-config", schemaFile, "-timeout", "-1s"}, 2, "-timeout must be > 0"},
		{url, []string{"inspect", "-config", "nope.yaml"}, 2, "reading the schema: open nope.yaml: no such file or directory (set -config)"},
		{url, []string{"inspect", "-config", schemaFile, "-domain", "tabel"}, 2, `no domain "tabel" in ` + schemaFile},
		{url, []string{"inspect", "-config", schemaFile, "-domain", "user_digest", "-param", "id=x"}, 2, "param id=x: id takes int64 values in domain user_digest"},
		{url, []string{"inspect", "-config", bad}, 1, "bad.yaml:4:"},
		{nil, []string{"help"}, 0, ""},
		{nil, []string{"inspect", "-h"}, 0, ""},
	} {
		code, stdout, stderr := runCmd(t, c.env, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("lockkit %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
		if c.code == 0 && !strings.Contains(stdout, "usage: lockkit") {
			t.Errorf("lockkit %v: stdout %q", c.args, stdout)
		}
	}
}

func seed(t *testing.T, rdb redis.Cmdable) {
	t.Helper()
	ctx := tctx(t)
	tok := strings.Repeat("A", 26)
	for _, err := range []error{
		rdb.Set(ctx, "lock:{table:12}", holder.Encode(tok, holder.Holder{Host: "web-1", PID: 4242, Owner: "billing"}), time.Minute).Err(),
		rdb.Set(ctx, "lock:{table:12}:fence", "41", 0).Err(),
		rdb.ZAdd(ctx, "lock:{table:12}:q", redis.Z{Score: 1, Member: "W"}).Err(),
		rdb.Set(ctx, "lock:{user:9182:digest}", strings.Repeat("B", 26), time.Minute).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func checkTable(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"DOMAIN", "lock:{table:12}", "id=12", "billing@web-1:4242", "41", "lock:{user:9182:digest}", "token BBBBBBBB…", "2 locks (2 keys scanned, 0 skipped)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectRedis(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	seed(t, srv.Client(t))
	env := map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0"}

	code, out, errOut := runCmd(t, env, "inspect", "-config", schemaFile)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkTable(t, out)

	code, out, errOut = runCmd(t, nil, "inspect", "-config", schemaFile, "-redis-url", "redis://"+srv.Addr(), "-json", "-domain", "table", "-param", "id=12")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Locks []struct {
			Key    string
			Params map[string]any
			Holder struct {
				Host, Owner string
				PID         int
			}
			Fence *int64
			Queue int64
			TTLMs int64 `json:"ttl_ms"`
		}
		Complete bool
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Locks) != 1 || !rep.Complete {
		t.Fatalf("json: %s", out)
	}
	l := rep.Locks[0]
	if l.Key != "lock:{table:12}" || l.Params["id"] != "12" || l.Holder.Owner != "billing" || l.Holder.PID != 4242 ||
		l.Fence == nil || *l.Fence != 41 || l.Queue != 1 || l.TTLMs <= 0 || l.TTLMs > 60000 {
		t.Errorf("json lock: %+v", l)
	}

	// -watch with -count: one JSON line per refresh.
	code, out, errOut = runCmd(t, env, "inspect", "-config", schemaFile, "-json", "-watch", "20ms", "-count", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("-watch -count 3 printed %d lines:\n%s", len(lines), out)
	}
	for _, ln := range lines {
		if err := json.Unmarshal([]byte(ln), &rep); err != nil || len(rep.Locks) != 2 {
			t.Errorf("watch line %q: %v", ln, err)
		}
	}
	code, out, _ = runCmd(t, env, "inspect", "-config", schemaFile, "-watch", "10ms", "-count", "2")
	if code != 0 || strings.Count(out, "--- ") != 2 || strings.Count(out, "2 locks") != 2 {
		t.Errorf("table watch: exit %d\n%s", code, out)
	}

	// A server that is gone: exit 1, saying where and why.
	srv.Stop(t)
	code, _, errOut = runCmd(t, env, "inspect", "-config", schemaFile)
	if code != 1 || !strings.Contains(errOut, "redis "+srv.Addr()+" (SCAN MATCH lock:{*}): SCAN (redis):") {
		t.Errorf("stopped server: exit %d, %q", code, errOut)
	}
}

func TestInspectClusterAndSentinel(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireRedisCLI(t)
	testserver.RequireSentinel(t)
	cl := testserver.StartCluster(t, 3)
	seed(t, cl.Client(t))
	code, out, errOut := runCmd(t, nil, "inspect", "-config", schemaFile, "-cluster", strings.Join(cl.Addrs(), ","))
	if code != 0 {
		t.Fatalf("cluster: exit %d: %s", code, errOut)
	}
	checkTable(t, out)

	primary := testserver.StartRedis(t)
	seed(t, primary.Client(t))
	s := testserver.StartSentinel(t, primary, "locks", 1)
	code, out, errOut = runCmd(t, nil, "inspect", "-config", schemaFile, "-sentinel", s.Addr(), "-master", "locks")
	if code != 0 {
		t.Fatalf("sentinel: exit %d: %s", code, errOut)
	}
	checkTable(t, out)
}

// TestInspectNeverAnsweredIsAnError: a Redis that never answers (nothing
// listens, a Unix socket that does not exist, a Sentinel nobody runs) is
// exit 1 whatever -timeout is; with a 1 s timeout it used to print "no live
// locks" and exit 0, reading the error at its deadline as "stopped at the
// timeout".
func TestInspectNeverAnsweredIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	// A listener that accepts and never answers: a stalled server.
	stall, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stall.Close()
	go func() {
		for {
			c, err := stall.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"refused", []string{"-redis-url", "redis://" + dead}},
		{"stalled", []string{"-redis-url", "redis://" + stall.Addr().String()}},
		{"bad socket", []string{"-redis-url", "unix:///nonexistent/redis.sock"}},
		{"no sentinel", []string{"-sentinel", dead, "-master", "mymaster"}},
	} {
		for _, timeout := range []string{"300ms", "1s"} {
			args := append([]string{"inspect", "-config", schemaFile, "-timeout", timeout}, c.args...)
			code, out, errOut := runCmd(t, nil, args...)
			if code != 1 || strings.Contains(out, "no live locks") || errOut == "" {
				t.Errorf("%s, -timeout %s: exit %d, stdout %q, stderr %q; want exit 1 and the reason", c.name, timeout, code, out, errOut)
			}
		}
	}
}

// TestInspectExactKeysAndLongTTLs: a key with bytes that are not UTF-8
// round-trips through -json (key_base64 beside the readable key), and a TTL
// past ~292 years is shown as what it is, not "no expiry".
func TestInspectExactKeysAndLongTTLs(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t)
	tok := strings.Repeat("B", 26)
	bad := "lock:{table:\xff\xfe}"
	if err := rdb.Set(ctx, bad, holder.Encode(tok, holder.Holder{}), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	long := "lock:{table:forever}"
	if err := rdb.Set(ctx, long, holder.Encode(tok, holder.Holder{}), 0).Err(); err != nil {
		t.Fatal(err)
	}
	const ms = int64(1) << 62 // ~146 million years
	if err := rdb.Do(ctx, "PEXPIRE", long, ms).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, nil, "inspect", "-config", schemaFile, "-redis-url", "redis://"+srv.Addr(), "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Locks []struct {
			Key       string
			KeyBase64 string `json:"key_base64"`
			TTLMs     int64  `json:"ttl_ms"`
			Problem   string
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	found := 0
	for _, l := range rep.Locks {
		switch {
		case l.KeyBase64 != "":
			raw, err := base64.StdEncoding.DecodeString(l.KeyBase64)
			if err != nil || string(raw) != bad {
				t.Errorf("key_base64 %q decodes to %q, want %q", l.KeyBase64, raw, bad)
			}
			found++
		case l.Key == long:
			if l.TTLMs < ms-60_000 || strings.Contains(l.Problem, "no expiry") {
				t.Errorf("long TTL: ttl_ms %d, problem %q; want about %d", l.TTLMs, l.Problem, ms)
			}
			found++
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the 2 keys in %s", found, out)
	}
	code, out, _ = runCmd(t, nil, "inspect", "-config", schemaFile, "-redis-url", "redis://"+srv.Addr())
	if code != 0 || !strings.Contains(out, "53375995583d") {
		t.Errorf("table: exit %d, want the long TTL in days:\n%s", code, out)
	}
}
