package inspect

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	seedTTL = 10 * time.Minute
)

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// seed writes locks the way the runtime does (SET key value PX ttl; the fence
// counter at key:fence; a FIFO queue at key:q with its side keys), today's
// plain token values and values with a holder description, and keys that
// are not locks of the schema.
func seed(t *testing.T, ctx context.Context, rdb redis.Cmdable) {
	t.Helper()
	tok := func(c string) string { return strings.Repeat(c, 26) }
	px := seedTTL
	var errs []error
	set := func(k, v string, ttl time.Duration) { errs = append(errs, rdb.Set(ctx, k, v, ttl).Err()) }

	k := "lock:{table:12}"
	set(k, holder.Encode(tok("A"), holder.Holder{Host: "web-1", PID: 4242, Owner: "billing", TraceID: traceID}), px)
	set(k+":fence", "1763860000000001", 0)
	// The first waiter queued with a holder description, the second without.
	desc := []string{"|" + string(holder.AppendDescription(nil, holder.Holder{Host: "web-2", PID: 77, Owner: "billing"})), ""}
	for i, w := range []string{tok("W"), tok("X")} {
		errs = append(errs,
			rdb.ZAdd(ctx, k+":q", redis.Z{Score: 1763860000000002 + float64(i), Member: w}).Err(),
			rdb.ZAdd(ctx, k+":qd", redis.Z{Score: 1763860000000, Member: w}).Err(),
			rdb.HSet(ctx, k+":qc", w, "lock:{table:12}:w:abc|10000|3000|1"+desc[i]).Err())
	}
	set(k+":qp", "00-"+traceID+"-00f067aa0ba902b7-01", 0)
	errs = append(errs, rdb.HSet(ctx, k+":data", "value", "booked", "fence", "1763860000000001").Err()) // a fence.Set resource

	k = "lock:{table:a%3Ab%7Bc%7D}" // id "a:b{c}", today's plain token
	set(k, tok("B"), px)
	set(k+":fence", "7", 0)

	set("lock:{user:9182:digest}", tok("C"), px)
	set("lock:{user:-3:digest}", holder.Encode(tok("D"), holder.Holder{PID: 1}), px)
	set("lock:{cron:reconcile:480000}", holder.Encode(tok("E"), holder.Holder{Host: "job-7", PID: 99, Owner: "cron worker"}), px)
	set("lock:{job:x y}", tok("F")+";garbage", px)
	set("lock:{slot:42}", tok("G"), 0) // no expiry: the runtime never writes that
	set("lock:{edge:é✓:18446744073709551615:-1}", tok("H"), px)

	// Not locks of this schema.
	errs = append(errs, rdb.HSet(ctx, "lock:{table:99}", "value", "v", "fence", "3").Err()) // a fence.Set resource named like a lock
	set("lock:{table:1:2}", tok("I"), px)
	set("lock:{user:007:digest}", tok("J"), px)
	set("lock:{nothing}", tok("K"), px)
	set("other:{table:12}", tok("L"), px)
	set("unrelated", "x", 0)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// mask rounds the TTLs the seed set (a little under seedTTL by now) up to
// seedTTL, so golden text does not depend on timing.
func mask(rep *Report) {
	for i := range rep.Locks {
		if ms := rep.Locks[i].TTLMillis; ms > (seedTTL-time.Minute).Milliseconds() && ms <= seedTTL.Milliseconds() {
			rep.Locks[i].TTLMillis = seedTTL.Milliseconds()
		}
		for j := range rep.Locks[i].Waiters {
			// The seed's join orders are fixed server µs in the past.
			if rep.Locks[i].Waiters[j].WaitedMillis > 0 {
				rep.Locks[i].Waiters[j].WaitedMillis = 60_000
			}
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func render(t *testing.T, rep *Report) (table, js []byte) {
	t.Helper()
	var tb, jb bytes.Buffer
	if err := WriteTable(&tb, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&jb, rep, false); err != nil {
		t.Fatal(err)
	}
	return tb.Bytes(), jb.Bytes()
}

// readOnly is a go-redis hook that fails the test on any command other than
// the inspector's reads, and counts the commands it sees.
type readOnly struct {
	t  *testing.T
	mu sync.Mutex
	n  map[string]int
}

var readCommands = map[string]bool{"scan": true, "get": true, "pttl": true, "zcard": true,
	"time": true, "zrange": true, "hmget": true, // these three for FIFO waiters
	"exists": true} // for orphaned fence counters

// Commands a go-redis client sends on its own: the handshake and, on a
// Cluster, the slot map.
var handshake = map[string]bool{"hello": true, "ping": true, "cluster": true}

// What the servers count besides: the handshake, and the test's own
// CONFIG RESETSTAT and INFO.
var plumbing = map[string]bool{"hello": true, "ping": true, "cluster": true, "client": true, "info": true, "config": true, "command": true}

func (h *readOnly) check(c redis.Cmder) {
	name := strings.ToLower(c.Name())
	h.mu.Lock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[name]++
	h.mu.Unlock()
	if name == "client" && len(c.Args()) > 1 {
		// go-redis's own connection handshake with the README's options
		// (identity and maintenance notifications on): no data touched.
		if sub, _ := c.Args()[1].(string); strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "maint_notifications") {
			return
		}
	}
	if !readCommands[name] && !handshake[name] {
		h.t.Errorf("the inspector sent %q: %v", name, c.Args())
	}
}
func (h *readOnly) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *readOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error { h.check(c); return next(ctx, c) }
}
func (h *readOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cs []redis.Cmder) error {
		for _, c := range cs {
			h.check(c)
		}
		return next(ctx, cs)
	}
}

// serverCommands returns the commands the servers ran since statsReset
// (INFO commandstats), minus the handshake and the test's own.
func serverCommands(t *testing.T, ctx context.Context, addrs []string) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^cmdstat_([a-z|_-]+):calls=(\d+)`)
	got := map[string]bool{}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true})
		info, err := c.Info(ctx, "commandstats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(info, -1) {
			name, _, _ := strings.Cut(m[1], "|")
			if !plumbing[name] {
				got[m[1]] = true
			}
		}
	}
	return got
}

func statsReset(t *testing.T, ctx context.Context, addrs []string) {
	t.Helper()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true})
		err := c.ConfigResetStat(ctx).Err()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestInspectGolden(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t, 60*time.Second)
	seed(t, ctx, srv.Client(t))
	statsReset(t, ctx, []string{srv.Addr()})

	rdb := srv.Client(t)
	hook := &readOnly{t: t}
	rdb.AddHook(hook)
	in := New(loadSchema(t))
	rep, err := in.Inspect(ctx, rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mask(rep)
	table, js := render(t, rep)
	golden(t, "table.golden", table)
	golden(t, "json.golden", js)
	if !rep.Complete || rep.Stopped != "" {
		t.Errorf("report not complete: %+v", rep)
	}
	if hook.n["scan"] == 0 || hook.n["get"] == 0 || hook.n["zcard"] == 0 || hook.n["pttl"] == 0 {
		t.Errorf("commands seen by the hook: %v", hook.n)
	}
	// On the server's side too: only reads ran.
	for c := range serverCommands(t, ctx, []string{srv.Addr()}) {
		if !readCommands[c] {
			t.Errorf("the server ran %q during the inspection", c)
		}
	}
	if hook.n["keys"] != 0 {
		t.Error("KEYS sent")
	}
}

func keysOf(rep *Report) []string {
	var ks []string
	for _, l := range rep.Locks {
		ks = append(ks, l.Key)
	}
	return ks
}

func TestInspectFilters(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t, 60*time.Second)
	rdb := srv.Client(t)
	seed(t, ctx, rdb)
	in := New(loadSchema(t))
	for _, c := range []struct {
		o    Options
		glob string
		want string
	}{
		{Options{Domain: "table"}, "lock:{table:*}", "lock:{table:12} lock:{table:a%3Ab%7Bc%7D}"},
		{Options{Domain: "table", Params: map[string]string{"id": "a:b{c}"}}, "lock:{table:a%3Ab%7Bc%7D}", "lock:{table:a%3Ab%7Bc%7D}"},
		{Options{Domain: "table", Params: map[string]string{"id": "*"}}, `lock:{table:\*}`, ""},
		{Options{Params: map[string]string{"id": "12"}}, "lock:{*}", "lock:{table:12}"},
		{Options{Params: map[string]string{"id": "-3"}}, "lock:{*}", "lock:{user:-3:digest}"},
		{Options{Params: map[string]string{"id": "x y"}}, "lock:{*}", "lock:{job:x y}"}, // not an int: user_digest cannot match
		{Options{Params: map[string]string{"id": "12", "to": "1"}}, "lock:{*}", ""},     // no domain has both
		{Options{Domain: "user_digest", Params: map[string]string{"id": "9182"}}, "lock:{user:9182:digest}", "lock:{user:9182:digest}"},
		{Options{Domain: "cron", Params: map[string]string{"hour": "480000"}}, "lock:{cron:*:480000}", "lock:{cron:reconcile:480000}"},
		{Options{Domain: "cron", Params: map[string]string{"hour": "1"}}, "lock:{cron:*:1}", ""},
		{Options{Params: map[string]string{"from": "é✓", "w": "-1"}}, "lock:{*}", "lock:{edge:é✓:18446744073709551615:-1}"},
		{Options{Domain: "job"}, "lock:{job:*}", "lock:{job:x y}"},
	} {
		if g, err := in.Glob(c.o); err != nil || g != c.glob {
			t.Errorf("Glob(%+v) = %q, %v; want %q", c.o, g, err, c.glob)
		}
		rep, err := in.Inspect(ctx, rdb, c.o)
		if err != nil {
			t.Errorf("Inspect(%+v): %v", c.o, err)
			continue
		}
		if got := strings.Join(keysOf(rep), " "); got != c.want {
			t.Errorf("Inspect(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Domain: "nope"}, `no domain "nope" in testdata/lockkit.yaml`},
		{Options{Params: map[string]string{"zzz": "1"}}, `no parameter "zzz" in any domain`},
		{Options{Domain: "table", Params: map[string]string{"job": "1"}}, `no parameter "job" in domain table`},
		{Options{Domain: "user_digest", Params: map[string]string{"id": "x"}}, "id takes int64 values in domain user_digest"},
		{Options{Params: map[string]string{"hour": "x"}}, "hour takes int64 values in domain cron"},
		{Options{Domain: "slot", Params: map[string]string{"n": "-1"}}, "n takes uint32 values in domain slot"},
	} {
		if _, err := in.Inspect(ctx, rdb, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Inspect(%+v) error = %v, want it to say %q", c.o, err, c.want)
		}
	}
}

// seedMany writes n lock keys of domain job with a fence each.
func seedMany(t *testing.T, ctx context.Context, rdb redis.Cmdable, n int) {
	t.Helper()
	pipe := rdb.Pipeline()
	for i := range n {
		k := "lock:{job:" + strconv.Itoa(i) + "}"
		pipe.Set(ctx, k, holder.Encode("TOKEN"+strconv.Itoa(i), holder.Holder{Owner: "w"}), seedTTL)
		pipe.Set(ctx, k+":fence", i, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestInspectBounds(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t, 120*time.Second)
	rdb := srv.Client(t)
	seedMany(t, ctx, rdb, 5000)
	in := New(loadSchema(t))

	rep, err := in.Inspect(ctx, rdb, Options{Limit: 100, ScanCount: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 100 || rep.Stopped != "limit" || rep.Complete {
		t.Errorf("limit 100 over 5000 locks: %d locks, stopped %q, complete %v", len(rep.Locks), rep.Stopped, rep.Complete)
	}
	if s := Summary(rep); !strings.Contains(s, "100 locks") || !strings.Contains(s, "stopped at the limit of 100 locks: more may exist") {
		t.Errorf("summary: %s", s)
	}
	if rep.Scanned >= 5000 {
		t.Errorf("scanned %d keys to list 100: the scan did not stop", rep.Scanned)
	}

	rep, err = in.Inspect(ctx, rdb, Options{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 5000 || !rep.Complete {
		t.Errorf("limit 5000 over 5000 locks: %d locks, stopped %q", len(rep.Locks), rep.Stopped)
	}
	for i, l := range rep.Locks {
		if l.Fence == nil || l.Holder == nil || l.Holder.Owner != "w" {
			t.Fatalf("lock %d: %+v", i, l)
		}
	}

	// On a loaded machine Redis may not answer the first SCAN within 2ms,
	// which is an error by design (Redis never answered); a few tries give
	// it the chance to answer some and be stopped by the timeout.
	var start time.Time
	for try := 0; ; try++ {
		start = time.Now()
		rep, err = in.Inspect(ctx, rdb, Options{Timeout: 2 * time.Millisecond, ScanCount: 10, Limit: 10000})
		if err == nil || try == 9 || !strings.Contains(err.Error(), "no answer from Redis") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stopped != "timeout" || rep.Complete || len(rep.Locks) >= 5000 {
		t.Errorf("2ms timeout: %d locks, stopped %q", len(rep.Locks), rep.Stopped)
	}
	if s := Summary(rep); !strings.Contains(s, "stopped at the timeout of 2ms") {
		t.Errorf("summary: %s", s)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a 2ms timeout took %v", d)
	}

	// The caller's own cancellation is an error, not a partial report.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := in.Inspect(cctx, rdb, Options{}); err == nil {
		t.Error("Inspect on a cancelled ctx returned no error")
	}
	// A dead server is an error that says where.
	srv.Stop(t)
	if _, err := in.Inspect(ctx, rdb, Options{}); err == nil || !strings.Contains(err.Error(), "SCAN") {
		t.Errorf("Inspect on a stopped server: %v", err)
	}
}

func TestInspectCluster(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireRedisCLI(t)
	cl := testserver.StartCluster(t, 3)
	ctx := tctx(t, 120*time.Second)
	seeder := cl.Client(t)
	seed(t, ctx, seeder)
	// And 300 jobs, spread over every slot range.
	seedMany(t, ctx, seeder, 300)
	statsReset(t, ctx, cl.Addrs())

	hook := &readOnly{t: t}
	cc := cl.Client(t)
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(hook) })
	cc.AddHook(hook)
	in := New(loadSchema(t))
	rep, err := in.Inspect(ctx, cc, Options{Limit: 10000, ScanCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Complete || len(rep.Locks) != 8+300 {
		t.Fatalf("cluster: %d locks, stopped %q", len(rep.Locks), rep.Stopped)
	}
	perNode := map[string]int{}
	for _, l := range rep.Locks {
		m, err := seeder.MasterForKey(ctx, l.Key)
		if err != nil {
			t.Fatal(err)
		}
		if want := m.Options().Addr; l.Node != want {
			t.Errorf("%s: node %q, want %q", l.Key, l.Node, want)
		}
		perNode[l.Node]++
	}
	if len(perNode) != 3 {
		t.Errorf("locks found on %d masters, want 3: %v", len(perNode), perNode)
	}
	for _, a := range cl.Addrs() {
		if _, _, err := net.SplitHostPort(a); err != nil || perNode[a] == 0 {
			t.Errorf("no lock found on master %s (%v)", a, perNode)
		}
	}
	if hook.n["scan"] < 3 {
		t.Errorf("hook saw %v", hook.n)
	}
	for c := range serverCommands(t, ctx, cl.Addrs()) {
		if !readCommands[c] {
			t.Errorf("a cluster node ran %q during the inspection", c)
		}
	}

	// The same locks as on a single server: the same table and JSON, once
	// the jobs and the node addresses are left out.
	rep, err = in.Inspect(ctx, cc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []Lock
	for _, l := range rep.Locks {
		if l.Domain == "job" && l.Key != "lock:{job:x y}" {
			continue
		}
		l.Node = ""
		kept = append(kept, l)
	}
	rep.Locks = kept
	rep.Scanned, rep.Skipped = 0, 0
	mask(rep)
	table, js := render(t, rep)
	for _, g := range []struct {
		name string
		got  []byte
	}{{"table.golden", table}, {"json.golden", js}} {
		want, err := os.ReadFile(filepath.Join("testdata", g.name))
		if err != nil {
			t.Fatal(err)
		}
		// The counts differ (300 more jobs); the rest must not.
		re := regexp.MustCompile(`(?m)(\d+ keys scanned, \d+ skipped|"scanned": \d+|"skipped": \d+)`)
		gs, ws := re.ReplaceAllString(string(g.got), "N"), re.ReplaceAllString(string(want), "N")
		if gs != ws {
			t.Errorf("cluster output differs from %s\n--- got\n%s\n--- want\n%s", g.name, gs, ws)
		}
	}

	// Bounds hold across masters too.
	rep, err = in.Inspect(ctx, cc, Options{Limit: 50, ScanCount: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 50 || rep.Stopped != "limit" {
		t.Errorf("cluster limit 50: %d locks, stopped %q", len(rep.Locks), rep.Stopped)
	}
	ks := keysOf(rep)
	if !sort.StringsAreSorted(func() []string {
		var s []string
		for _, l := range rep.Locks {
			s = append(s, fmt.Sprintf("%s\x00%s", l.Domain, l.Key))
		}
		return s
	}()) {
		t.Errorf("not sorted: %v", ks)
	}
}

// TestLimitCountsListedLocksOnly: keys that decode as locks but are not
// (another type under a lock's name) take no place under the limit. With 20
// such keys and 6 locks, a limit of 6 lists all 6 and is complete; a limit
// of 5 lists 5 and says more exist.
func TestLimitCountsListedLocksOnly(t *testing.T) {
	testserver.RequireRedis(t)
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := tctx(t, 30*time.Second)
	for i := range 20 {
		if err := rdb.HSet(ctx, fmt.Sprintf("lock:{table:h%d}", i), "value", "v", "fence", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		if err := rdb.Set(ctx, fmt.Sprintf("lock:{table:%d}", i), holder.Encode(fmt.Sprintf("TOKEN%d", i), holder.Holder{Owner: "w"}), seedTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	in := New(loadSchema(t))
	rep, err := in.Inspect(ctx, rdb, Options{Limit: 6, ScanCount: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 6 || !rep.Complete || rep.Skipped != 20 {
		t.Errorf("limit 6: %d locks, complete %v (stopped %q), %d skipped; want all 6, complete, 20 skipped", len(rep.Locks), rep.Complete, rep.Stopped, rep.Skipped)
	}
	rep, err = in.Inspect(ctx, rdb, Options{Limit: 5, ScanCount: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Locks) != 5 || rep.Stopped != "limit" {
		t.Errorf("limit 5: %d locks, stopped %q; want 5, stopped by the limit", len(rep.Locks), rep.Stopped)
	}
}

// TestInspectOrphans (issue #26): under Options.Orphans the listing is the
// fence counters of the schema's lock keys whose lock key does not exist
// (left by locks no longer held; they never expire), with their last
// fence; counters of held locks, and keys of no domain, are not listed. It
// is read-only.
func TestInspectOrphans(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t, 60*time.Second)
	admin := srv.Client(t)
	seed(t, ctx, admin) // lock:{table:12} and lock:{table:a%3Ab%7Bc%7D} are held, with counters
	for k, v := range map[string]string{
		"lock:{table:77}:fence":        "1763860000000005",
		"lock:{user:1:digest}:fence":   "9",
		"lock:{nothing}:fence":         "3", // no domain's key
		"other:{table:5}:fence":        "4", // another prefix
		"lock:{user:2:digest}:fence:x": "1", // not a counter
		"lock:{table:bad}:fence":       "not a number",
	} {
		if err := admin.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	statsReset(t, ctx, []string{srv.Addr()})
	rdb := srv.Client(t)
	hook := &readOnly{t: t}
	rdb.AddHook(hook)
	rep, err := New(loadSchema(t)).Inspect(ctx, rdb, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range rep.Orphans {
		f := "nil"
		if o.Fence != nil {
			f = strconv.FormatInt(*o.Fence, 10)
		}
		got = append(got, o.Domain+" "+o.Key+" "+f)
	}
	want := []string{"table lock:{table:77} 1763860000000005", "table lock:{table:bad} nil", "user_digest lock:{user:1:digest} 9"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("orphans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(rep.Locks) != 0 || !rep.Complete {
		t.Errorf("report: %d locks, complete %v", len(rep.Locks), rep.Complete)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "3 orphaned fence counters") || !strings.Contains(b.String(), "id=77") {
		t.Errorf("table:\n%s", b.String())
	}
	for c := range serverCommands(t, ctx, []string{srv.Addr()}) {
		if !readCommands[c] {
			t.Errorf("the server ran %q during the inspection", c)
		}
	}
}
