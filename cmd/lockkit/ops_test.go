package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

const opsSchema = "testdata/ops.yaml"

// The domains of testdata/ops.yaml, bound by hand as generated code does.
var (
	tableSpec = lockkit.DomainSpec{Name: "table", Pattern: "table:{id}",
		Policy: lockkit.Policy{TTL: 3 * time.Second, Renew: 200 * time.Millisecond, Fencing: true}}
	fqSpec = lockkit.DomainSpec{Name: "fq", Pattern: "fq:{id}",
		Policy: lockkit.Policy{TTL: 3 * time.Second, Renew: 200 * time.Millisecond, Fencing: true, Wait: "fifo",
			Retry: lockkit.Retry{Attempts: 2, MaxWait: 30 * time.Second}}}
)

func newClient(t *testing.T, addr, owner string) *lockkit.Client {
	t.Helper()
	return newClientOn(t, redis.NewClient(&redis.Options{Addr: addr}), owner)
}

// newClientOn is a lockkit client on rdb, which it closes at the end.
func newClientOn(t *testing.T, rdb redis.UniversalClient, owner string) *lockkit.Client {
	t.Helper()
	c, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
		rdb.Close()
	})
	return c
}

// holding runs lock.Do in the background. fn reports its fence on held,
// then waits for its ctx to end and, once told to by after, makes the
// fenced write write(fence); Do's error comes on done.
type holding struct {
	held  chan int64
	lost  chan struct{} // closed when fn's ctx ended
	write chan func(fence int64) error
	wrote chan error
	done  chan error
}

func hold(ctx context.Context, l lockkit.Lock) *holding {
	h := &holding{held: make(chan int64, 1), lost: make(chan struct{}), write: make(chan func(int64) error, 1), wrote: make(chan error, 1), done: make(chan error, 1)}
	// testDone bounds the holder by the test's ctx, which is not fn's:
	// fn's own ctx ending is what the tests wait for (the lease lost).
	testDone := ctx.Done()
	go func() {
		h.done <- l.Do(ctx, func(fctx context.Context, lease *lockkit.Lease) error {
			h.held <- lease.Fence()
			select {
			case <-fctx.Done():
				close(h.lost)
			case <-testDone:
				return context.Canceled
			}
			select {
			case w := <-h.write:
				h.wrote <- w(lease.Fence())
			case <-testDone:
			}
			return nil
		})
	}()
	return h
}

func recv[T any](t *testing.T, c <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(d):
		t.Fatalf("no %s within %v", what, d)
	}
	var zero T
	return zero
}

// TestReleaseForceFences: a forced release of a fencing domain's lock
// bumps the fence; the old holder sees ErrLockLost at its next renewal
// (fn's ctx cancelled), and its later fenced write is rejected by fence.Set
// once the next holder, whose fence is higher, has written.
func TestReleaseForceFences(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	rdb := srv.Client(t)
	forceFenced(t, srv, func(ctx context.Context, v string, fc int64) error { return fence.Set(ctx, rdb, "res:12", v, fc) },
		func(ctx context.Context) string { v, _, _ := fence.Get(ctx, rdb, "res:12"); return v })
}

// TestReleaseForceFencesTable: the same with the resource a PostgreSQL row
// written through fence.Table.
func TestReleaseForceFencesTable(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequirePostgres(t)
	srv := testserver.StartRedis(t)
	pg := testserver.StartPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, stmt := range []string{
		`CREATE TABLE bookings (id text PRIMARY KEY, guest text, fence bigint)`,
		`INSERT INTO bookings (id) VALUES ('12')`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	tbl := fence.Table{Table: "bookings", KeyColumn: "id"}
	forceFenced(t, srv, func(ctx context.Context, v string, fc int64) error {
		return tbl.Update(ctx, db, "12", fc, fence.Column{Name: "guest", Value: v})
	}, func(ctx context.Context) string {
		var g sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT guest FROM bookings WHERE id = '12'`).Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g.String
	})
}

// forceFenced: a holder of lock:{table:12} is forced out; it loses its
// lease at its next renewal, and its write with its old fence is rejected
// after the next holder (with a higher fence) has written.
func forceFenced(t *testing.T, srv *testserver.Redis, write func(ctx context.Context, value string, fence int64) error, read func(ctx context.Context) string) {
	ctx, cancel := context.WithCancel(tctx(t))
	defer cancel() // ends the holders' Do before the clients close
	rdb := srv.Client(t)
	old := newClient(t, srv.Addr(), "billing")
	next := newClient(t, srv.Addr(), "billing-2")
	key := "lock:{table:12}"
	h := hold(ctx, old.Domain(tableSpec).Key(8).Literal("table:").String("12").Lock())
	oldFence := recv(t, h.held, 10*time.Second, "grant")

	code, out, errOut := runCmd(t, nil, "release", "-force", "-config", opsSchema, "-redis-url", "redis://"+srv.Addr(), "-json", key)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	var f struct {
		Key, Token string
		Holder     struct{ Owner string }
		Fencing    bool
		OldFence   *int64 `json:"old_fence"`
		NewFence   int64  `json:"new_fence"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if f.Key != key || f.Holder.Owner != "billing" || !f.Fencing || f.OldFence == nil || *f.OldFence != oldFence || f.NewFence <= oldFence {
		t.Fatalf("release said %s; the holder's fence was %d", out, oldFence)
	}
	if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key still there after the release: %d %v", n, err)
	}

	// The old holder learns at its next renewal (200ms): allow a loaded machine.
	start := time.Now()
	recv(t, h.lost, 10*time.Second, "cancellation of the old holder's ctx")
	t.Logf("old holder's ctx cancelled %v after the forced release", time.Since(start).Round(time.Millisecond))

	// The next holder gets a higher fence and writes; the old one's write is rejected.
	var newFence int64
	err := next.Domain(tableSpec).Key(8).Literal("table:").String("12").Lock().Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		newFence = lease.Fence()
		return write(ctx, "new", newFence)
	})
	if err != nil || newFence <= f.NewFence {
		t.Fatalf("next holder: fence %d (forced release issued %d), err %v", newFence, f.NewFence, err)
	}
	h.write <- func(fc int64) error { return write(ctx, "stale", fc) }
	if err := recv(t, h.wrote, 10*time.Second, "old holder's write"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("old holder's fenced write with fence %d: %v, want ErrFenced", oldFence, err)
	}
	if err := recv(t, h.done, 10*time.Second, "old holder's Do"); !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("old holder's Do: %v, want ErrLockLost", err)
	}
	if v := read(ctx); v != "new" {
		t.Fatalf("resource holds %q", v)
	}
}

// TestReleaseForceFIFOHandsOver: inspect shows the FIFO waiter (who, how
// long); a forced release hands the lock to it through the FIFO release
// script, with a fence above the old holder's; watch reports the handover;
// the old holder sees ErrLockLost.
func TestReleaseForceFIFOHandsOver(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	fifoHandover(t, srv.Client(t), func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: srv.Addr()}) },
		envMap{"REDIS_URL": "redis://" + srv.Addr()}, nil)
}

// TestOpsCluster: the same on a 3-master Redis Cluster, addressed with
// -cluster: inspect scans every master, watch and release route by key
// (the key, :fence and :q share a hash slot), the handover's wake-up goes
// by SPUBLISH.
func TestOpsCluster(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireRedisCLI(t)
	cl := testserver.StartCluster(t, 3)
	fifoHandover(t, cl.Client(t), func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) },
		envMap{}, []string{"-cluster", strings.Join(cl.Addrs(), ",")})
}

// fifoHandover: a holder and a FIFO waiter on key lock:{fq:1}; inspect
// shows the waiter, release -force hands it the lock, watch reports the
// handover, the old holder loses its lease and its fenced write.
func fifoHandover(t *testing.T, rdb redis.UniversalClient, mk func() redis.UniversalClient, env envMap, addr []string) {
	ctx, cancel := context.WithCancel(tctx(t))
	defer cancel() // ends the holders' Do before the clients close
	a := newClientOn(t, mk(), "first")
	b := newClientOn(t, mk(), "second")
	cmd := func(name string, args ...string) []string {
		return append(append([]string{name, "-config", opsSchema}, addr...), args...)
	}
	key := "lock:{fq:1}"
	lockOf := func(c *lockkit.Client) lockkit.Lock { return c.Domain(fqSpec).Key(8).Literal("fq:").String("1").Lock() }
	ha := hold(ctx, lockOf(a))
	oldFence := recv(t, ha.held, 10*time.Second, "grant")
	hb := hold(ctx, lockOf(b))
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.ZCard(ctx, key+":q").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		select {
		case err := <-hb.done:
			t.Fatalf("the second client's Do returned: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second client never queued")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)

	code, out, errOut := runCmd(t, env, cmd("inspect", "-json", "-domain", "fq")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Locks []struct {
			Key     string
			Queue   int64
			Waiters []struct {
				Position int
				Token    string
				Waited   int64 `json:"waited_ms"`
				Holder   *struct{ Owner, Host string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Locks) != 1 || rep.Locks[0].Queue != 1 || len(rep.Locks[0].Waiters) != 1 {
		t.Fatalf("inspect: %s", out)
	}
	w := rep.Locks[0].Waiters[0]
	if w.Position != 1 || w.Holder == nil || w.Holder.Owner != "second" || w.Waited < 50 || w.Waited > 60_000 {
		t.Fatalf("waiter %+v: %s", w, out)
	}
	code, out, _ = runCmd(t, env, cmd("inspect")...)
	if code != 0 || !strings.Contains(out, key+" waiters: 1. second@") {
		t.Fatalf("table lacks the waiter:\n%s", out)
	}

	// watch, until one change: the handover.
	lines := newLines()
	watched := make(chan int, 1)
	go func() {
		watched <- run(ctx, cmd("watch", "-json", "-count", "1", "-for", "30s", key), env.get, lines, io.Discard)
	}()
	if l := recv(t, lines.c, 10*time.Second, "held line"); !strings.Contains(l, `"event":"held"`) {
		t.Fatalf("watch began with %s", l)
	}

	code, out, errOut = runCmd(t, env, cmd("release", "-force", key)...)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	t.Logf("release printed:\n%s", out)
	for _, want := range []string{"released " + key + " (domain fq) from token", "first@", fmt.Sprintf("fence: %d -> ", oldFence), "handed over to token", "second@"} {
		if !strings.Contains(out, want) {
			t.Errorf("release output lacks %q", want)
		}
	}
	bFence := recv(t, hb.held, 10*time.Second, "handover to the waiter")
	if bFence <= oldFence {
		t.Fatalf("waiter's fence %d <= old holder's %d", bFence, oldFence)
	}
	recv(t, ha.lost, 10*time.Second, "cancellation of the old holder's ctx")
	// The new holder's write (with its fence), then the old holder's.
	if err := fence.Set(ctx, rdb, "res:1", "new", bFence); err != nil {
		t.Fatal(err)
	}
	ha.write <- func(fc int64) error { return fence.Set(ctx, rdb, "res:1", "stale", fc) }
	if err := recv(t, ha.wrote, 10*time.Second, "old holder's write"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("old holder's fenced write with fence %d: %v, want ErrFenced", oldFence, err)
	}
	if err := recv(t, ha.done, 10*time.Second, "old holder's Do"); !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("old holder's Do: %v, want ErrLockLost", err)
	}
	var e struct {
		Event, Token string
		Holder       struct{ Owner string }
		Fence        int64
		From         struct {
			Holder struct{ Owner string }
			Fence  int64
		}
	}
	l := recv(t, lines.c, 10*time.Second, "handover line")
	if err := json.Unmarshal([]byte(l), &e); err != nil {
		t.Fatal(err)
	}
	if e.Event != "handover" || e.Holder.Owner != "second" || e.Fence != bFence || e.From.Holder.Owner != "first" || e.From.Fence != oldFence {
		t.Fatalf("watch: %s (fences %d -> %d)", l, oldFence, bFence)
	}
	if c := recv(t, watched, 10*time.Second, "watch's exit"); c != 0 {
		t.Fatalf("watch exit %d", c)
	}
}

// TestWatchDomain: acquired, released and expired, through lockkit and a
// holder that dies (a SET with a short TTL), each one line; -count stops it.
func TestWatchDomain(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t)
	rdb := srv.Client(t)
	c := newClient(t, srv.Addr(), "watched")
	env := envMap{"REDIS_URL": "redis://" + srv.Addr()}
	if err := rdb.Set(ctx, "lock:{table:1}", holder.Encode("T1", holder.Holder{Owner: "pre"}), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	lines := newLines()
	watched := make(chan int, 1)
	go func() {
		watched <- run(ctx, []string{"watch", "-config", opsSchema, "-count", "4", "-for", "60s", "table"}, env.get, lines, io.Discard)
	}()
	expect := func(parts ...string) {
		t.Helper()
		l := recv(t, lines.c, 10*time.Second, strings.Join(parts, " "))
		for _, p := range parts {
			if !strings.Contains(l, p) {
				t.Fatalf("watch line %q lacks %q", l, p)
			}
		}
	}
	expect("held", "lock:{table:1}", "pre@")
	lease, err := c.Domain(tableSpec).Key(8).Literal("table:").String("2").Lock().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect("acquired", "lock:{table:2}", "watched@", fmt.Sprintf("fence %d", lease.Fence()))
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expect("released", "lock:{table:2}", "watched@")
	if err := rdb.Set(ctx, "lock:{table:3}", holder.Encode("T3", holder.Holder{Owner: "dies"}), 600*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	expect("acquired", "lock:{table:3}", "dies@")
	expect("expired", "lock:{table:3}", "dies@")
	if c := recv(t, watched, 10*time.Second, "watch's exit"); c != 0 {
		t.Fatalf("watch exit %d", c)
	}
}

func TestOpsErrors(t *testing.T) {
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	ctx := tctx(t)
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "lock:{job:1}", holder.Encode("J1", holder.Holder{Owner: "worker"}), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	env := envMap{"REDIS_URL": "redis://" + srv.Addr()}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"release", "-config", opsSchema, "lock:{table:1}"}, 2, "say so with -force"},
		{[]string{"release", "-force", "-config", opsSchema}, 2, "give the KEY"},
		{[]string{"release", "-force", "-config", opsSchema, "lock:{nope:1}"}, 2, `"lock:{nope:1}": not a lock key of the schema`},
		{[]string{"release", "-force", "-config", opsSchema, "lock:{table:1}", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"release", "-force", "-config", opsSchema, "lock:{table:1}"}, 1, "lock:{table:1}: not held"},
		{[]string{"release", "-force", "-config", opsSchema, "lock:{job:1}"}, 2, "the domain does not fence (domain job"},
		{[]string{"watch", "-config", opsSchema}, 2, "give the KEY or DOMAIN"},
		{[]string{"watch", "-config", opsSchema, "tabel"}, 2, `"tabel" is neither a domain of testdata/ops.yaml nor a lock key`},
		{[]string{"watch", "-config", opsSchema, "-interval", "1ms", "table"}, 2, "-interval must be at least 10ms"},
		{[]string{"watch", "-config", opsSchema, "-param", "id=1", "lock:{table:1}"}, 2, "-param goes with a DOMAIN"},
		{[]string{"watch", "-config", opsSchema, "-param", "nope=1", "table"}, 2, `no parameter "nope"`},
	} {
		code, _, stderr := runCmd(t, env, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("lockkit %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	// With -no-fence-ok the unfenced lock goes, and the output says it is unfenced.
	code, out, errOut := runCmd(t, env, "release", "-force", "-no-fence-ok", "-config", opsSchema, "lock:{job:1}")
	if code != 0 || !strings.Contains(out, "worker@") || !strings.Contains(out, "fence: none") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if n, _ := rdb.Exists(ctx, "lock:{job:1}", "lock:{job:1}:fence").Result(); n != 0 {
		t.Fatalf("%d keys left (the lock, or a fence counter for a domain without fencing)", n)
	}
	// -token: only the holder named.
	rdb.Set(ctx, "lock:{table:5}", "T5", time.Minute)
	code, _, errOut = runCmd(t, env, "release", "-force", "-token", "OTHER", "-config", opsSchema, "lock:{table:5}")
	if code != 1 || !strings.Contains(errOut, "not held by token OTHER (it holds T5)") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

type envMap map[string]string

func (e envMap) get(k string) string { return e[k] }

// lines is an io.Writer that hands each line written to c.
type lines struct {
	mu  sync.Mutex
	buf []byte
	c   chan string
}

func newLines() *lines { return &lines{c: make(chan string, 100)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		l.c <- string(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}
