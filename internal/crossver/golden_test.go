package crossver

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.golden from the current format")

// The golden tests pin what each backend writes (docs/wire.md) for a fixed
// set of locks. The random parts are normalised: each lease's token becomes
// <token:NAME>, the host and pid of the holder description <host> and
// <pid>, a FIFO Notifier's id <notifier>, server times in µs (fences, queue
// order) <µs> and in ms (waiter deadlines) <ms>. Any other change to a key,
// a value, a field, a message or a table shows up as a golden diff: a
// format change must be made on purpose, with its compatibility rule
// (docs/wire.md "Compatibility rules") and a CHANGELOG entry.

// normaliser rewrites one snapshot's random parts.
type normaliser struct {
	pairs []string
	pid   *regexp.Regexp
}

func newNormaliser() *normaliser {
	host, _ := os.Hostname()
	n := &normaliser{}
	if h := url.QueryEscape(host); h != "" {
		n.pairs = append(n.pairs, "h="+h+"&", "h=<host>&")
	}
	n.pid = regexp.MustCompile(`\bp=` + strconv.Itoa(os.Getpid()) + `\b`)
	return n
}

func (n *normaliser) token(name, token string) {
	n.pairs = append(n.pairs, token, "<token:"+name+">")
}

var (
	notifierRE = regexp.MustCompile(`:w:[0-9a-f]{16}`)
	microsRE   = regexp.MustCompile(`\b1[0-9]{15}\b`)
	millisRE   = regexp.MustCompile(`\b1[0-9]{12}\b`)
	runIDRE    = regexp.MustCompile(`\b[0-9a-f]{40}\b`) // a Redis server's run_id
)

func (n *normaliser) apply(s string) string {
	s = strings.NewReplacer(n.pairs...).Replace(s)
	s = n.pid.ReplaceAllString(s, "p=<pid>")
	s = notifierRE.ReplaceAllString(s, ":w:<notifier>")
	s = runIDRE.ReplaceAllString(s, "<run_id>")
	s = microsRE.ReplaceAllString(s, "<µs>")
	return millisRE.ReplaceAllString(s, "<ms>")
}

// dumpRedis lists every key of rdb: name, type, expiry and value (sorted
// members and fields).
func dumpRedis(t *testing.T, ctx context.Context, rdb redis.Cmdable, n *normaliser) string {
	t.Helper()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, k := range keys {
		typ := rdb.Type(ctx, k).Val()
		if typ == "none" {
			continue // gone since KEYS
		}
		ttl := "persistent"
		if pttl := rdb.PTTL(ctx, k).Val(); pttl > 0 {
			ttl = "expires"
		}
		var val string
		switch typ {
		case "string":
			val = strconv.Quote(rdb.Get(ctx, k).Val())
		case "zset":
			zs := rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
			var ms []string
			for _, z := range zs {
				ms = append(ms, fmt.Sprintf("%v=%.0f", z.Member, z.Score))
			}
			val = "{" + strings.Join(ms, ", ") + "}"
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			var fs []string
			for f, v := range h {
				fs = append(fs, f+"="+strconv.Quote(v))
			}
			sort.Strings(fs)
			val = "{" + strings.Join(fs, ", ") + "}"
		default:
			val = "(unexpected type)"
		}
		lines = append(lines, n.apply(fmt.Sprintf("%s %s %s %s", k, typ, ttl, val)))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if string(want) != got {
		t.Errorf("%s: the wire format changed (a format change must be on purpose: docs/wire.md compatibility rules, CHANGELOG; then -update)\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// golden domains: the same on every backend.
func goldenDomains(c *lockkit.Client) (plain, fenced, prefixed *lockkit.Domain) {
	ttl := 10 * time.Second
	plain = c.Domain(lockkit.DomainSpec{Name: "plain", Pattern: "plain:{id}", Policy: lockkit.Policy{TTL: ttl}})
	fenced = c.Domain(lockkit.DomainSpec{Name: "fenced", Pattern: "fenced:{id}", Policy: lockkit.Policy{TTL: ttl, Fencing: true}})
	prefixed = c.Domain(lockkit.DomainSpec{Name: "prefixed", Pattern: "job:{name}", Prefix: "app:", Policy: lockkit.Policy{TTL: ttl}})
	return
}

func mustAcquire(t *testing.T, ctx context.Context, l lockkit.Lock) *lockkit.Lease {
	t.Helper()
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("acquire %s: %v", l.Key(), err)
	}
	return lease
}

func releaseLease(t *testing.T, ctx context.Context, l *lockkit.Lease) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release %s: %v", l.Key(), err)
	}
}

// TestGoldenRedis pins the keys, values, queue entries and the handover
// message of one Redis (single node; Sentinel and Cluster write the same
// keys: the layout does not depend on the deployment).
func TestGoldenRedis(t *testing.T) {
	testserver.RequireRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	n := newNormaliser()
	var out strings.Builder

	c, err := newClient(rdb, nil, lockkit.WithOwner("golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	anon, err := newClient(r.Client(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close(ctx)
	plain, fenced, prefixed := goldenDomains(c)
	anonPlain, _, _ := goldenDomains(anon)

	lp := mustAcquire(t, ctx, plain.Key(16).Literal("plain:").Int(1).Lock())
	n.token("plain", lp.Token())
	la := mustAcquire(t, ctx, anonPlain.Key(16).Literal("plain:").Int(2).Lock())
	n.token("anonymous", la.Token())
	lf := mustAcquire(t, ctx, fenced.Key(16).Literal("fenced:").Int(1).Lock())
	n.token("fenced", lf.Token())
	lx := mustAcquire(t, ctx, prefixed.Key(16).Literal("job:").String("x:y{z}%").Lock())
	n.token("prefixed", lx.Token())

	// A multi-lock set on one server: the acquire-all script.
	setA := fenced.Key(16).Literal("fenced:").Int(10).Lock()
	setB := plain.Key(16).Literal("plain:").Int(10).Lock()
	err = lockkit.TryDoAll(ctx, func(ctx context.Context, set *lockkit.LeaseSet) error {
		n.token("setA", set.Lease(setA).Token())
		n.token("setB", set.Lease(setB).Token())
		out.WriteString("# held: plain (owner golden), plain without owner, fenced, prefix app: with an escaped parameter, a set of two (fenced and plain)\n")
		out.WriteString(dumpRedis(t, ctx, rdb, n))
		return nil
	}, setA, setB)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*lockkit.Lease{lp, la, lf, lx} {
		releaseLease(t, ctx, l)
	}
	out.WriteString("\n# released: the fence counters stay\n")
	out.WriteString(dumpRedis(t, ctx, rdb, n))

	// FIFO: a holder, a queued waiter, the handover message.
	fifoPolicy := lockkit.Policy{TTL: 10 * time.Second, Fencing: true, Wait: "fifo",
		Retry: lockkit.Retry{Attempts: 1000, MaxWait: 10 * time.Second}}
	fifo := c.Domain(lockkit.DomainSpec{Name: "fifo", Pattern: "fifo:{id}", Policy: fifoPolicy})
	c2, err := newClient(r.Client(t), nil, lockkit.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	fifo2 := c2.Domain(lockkit.DomainSpec{Name: "fifo", Pattern: "fifo:{id}", Policy: fifoPolicy})
	holder, err := fifo.Key(16).Literal("fifo:").Int(1).Lock().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n.token("fifo-holder", holder.Token())
	type res struct {
		l   *lockkit.Lease
		err error
	}
	waited := make(chan res, 1)
	go func() {
		l, err := fifo2.Key(16).Literal("fifo:").Int(1).Lock().Acquire(ctx)
		waited <- res{l, err}
	}()
	qkey := holder.Key() + ":q"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if zs := rdb.ZRange(ctx, qkey, 0, -1).Val(); len(zs) == 1 {
			n.token("fifo-waiter", zs[0])
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	// Wait until the waiter has subscribed, so the handover is published to it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if chs := rdb.PubSubChannels(ctx, holder.Key()+":w:*").Val(); len(chs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never subscribed")
		}
	}
	out.WriteString("\n# FIFO (fencing): held by fifo-holder (owner golden), fifo-waiter (owner waiter) queued\n")
	out.WriteString(dumpRedis(t, ctx, rdb, n))
	ps := rdb.PSubscribe(ctx, holder.Key()+":w:*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	releaseLease(t, ctx, holder)
	msgCtx, mcancel := context.WithTimeout(ctx, 10*time.Second)
	msg, err := ps.ReceiveMessage(msgCtx)
	mcancel()
	if err != nil {
		t.Fatal(err)
	}
	w := <-waited
	if w.err != nil {
		t.Fatal(w.err)
	}
	out.WriteString("\n# FIFO handover: the message published to the waiter's channel (token fence px previous joined)\n")
	out.WriteString(n.apply(fmt.Sprintf("PUBLISH %s %q\n", msg.Channel, msg.Payload)))
	out.WriteString("\n# FIFO after the handover: held by fifo-waiter\n")
	out.WriteString(dumpRedis(t, ctx, rdb, n))
	releaseLease(t, ctx, w.l)

	compareGolden(t, "redis", out.String())
}

// TestGoldenRedlock pins what a Redlock client writes on each of its nodes.
func TestGoldenRedlock(t *testing.T) {
	testserver.RequireRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nodes []redis.UniversalClient
	var rdbs []*redis.Client
	for range 3 {
		rdb := testserver.StartRedis(t).Client(t)
		// A new node, marked as an operator would (docs/deployments.md).
		if err := rediswire.MarkRedlockNode(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		nodes, rdbs = append(nodes, rdb), append(rdbs, rdb)
	}
	c, err := newRedlockClient(nodes, lockkit.WithOwner("golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	plain, _, prefixed := goldenDomains(c)
	n := newNormaliser()
	lp := mustAcquire(t, ctx, plain.Key(16).Literal("plain:").Int(1).Lock())
	n.token("plain", lp.Token())
	lx := mustAcquire(t, ctx, prefixed.Key(16).Literal("job:").String("x:y{z}%").Lock())
	n.token("prefixed", lx.Token())
	// A Redlock acquire or release returns once a majority answered: wait
	// (bounded) until every node has done its part.
	settle := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			done := true
			for _, rdb := range rdbs {
				if rdb.DBSize(ctx).Val() != int64(want)+1 { // and the node's marker
					done = false
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the Redlock nodes never all held %d keys", want)
			}
		}
	}
	settle(2)
	var out strings.Builder
	out.WriteString("# held: plain (owner golden), prefix app: with an escaped parameter; fencing is refused on Redlock\n")
	for i, rdb := range rdbs {
		fmt.Fprintf(&out, "## node %d\n", i+1)
		out.WriteString(dumpRedis(t, ctx, rdb, n))
	}
	releaseLease(t, ctx, lp)
	releaseLease(t, ctx, lx)
	settle(0)
	out.WriteString("\n# released: only each node's marker stays\n")
	for i, rdb := range rdbs {
		fmt.Fprintf(&out, "## node %d\n", i+1)
		out.WriteString(dumpRedis(t, ctx, rdb, n))
	}
	compareGolden(t, "redlock", out.String())
}

// TestGoldenPostgres pins the advisory lock ids of fixed keys (the hash),
// the pg_locks rows of held locks, and the fence table: its columns,
// constraints and rows.
func TestGoldenPostgres(t *testing.T) {
	testserver.RequirePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg := testserver.StartPostgres(t)
	pool := testserver.PgxPool(t, pg.DSN(), 8)
	if err := migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c, err := newClient(nil, pool, lockkit.WithOwner("golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	plain, fenced, prefixed := goldenDomains(c)
	n := newNormaliser()
	locks := map[string]lockkit.Lock{
		"plain":    plain.Key(16).Literal("plain:").Int(1).Lock(),
		"fenced":   fenced.Key(16).Literal("fenced:").Int(1).Lock(),
		"prefixed": prefixed.Key(16).Literal("job:").String("x:y{z}%").Lock(),
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range locks {
			if !yield(k) {
				return
			}
		}
	})
	var out strings.Builder
	out.WriteString("# advisory lock ids: KeyID(key) = first 8 bytes of SHA-256(key), big-endian, signed; pg_locks classid = id>>32, objid = id&0xffffffff\n")
	byID := map[[2]uint32]string{}
	for _, name := range names {
		key := locks[name].Key()
		id := postgres.KeyID(key)
		cl, ob := uint32(uint64(id)>>32), uint32(uint64(id))
		byID[[2]uint32{cl, ob}] = key
		fmt.Fprintf(&out, "%s id=%d classid=%d objid=%d\n", key, id, cl, ob)
	}
	var leases []*lockkit.Lease
	for _, name := range names {
		l := mustAcquire(t, ctx, locks[name])
		n.token(name, l.Token())
		leases = append(leases, l)
	}
	out.WriteString("\n# held: pg_locks (advisory) of this database\n")
	rows, err := pool.Query(ctx, `SELECT classid::bigint, objid::bigint, objsubid, mode, granted FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY classid, objid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var cl, ob int64
		var sub int16
		var mode string
		var granted bool
		if err := rows.Scan(&cl, &ob, &sub, &mode, &granted); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "advisory classid=%d objid=%d objsubid=%d mode=%s granted=%v key=%s\n", cl, ob, sub, mode, granted, byID[[2]uint32{uint32(cl), uint32(ob)}])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	dumpFences := func(title string) {
		out.WriteString("\n# " + title + "\n")
		rows, err := pool.Query(ctx, `SELECT key, fence FROM lockkit_fences ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			var f int64
			if err := rows.Scan(&k, &f); err != nil {
				t.Fatal(err)
			}
			out.WriteString(n.apply(fmt.Sprintf("lockkit_fences key=%q fence=%d\n", k, f)))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	dumpFences("held: lockkit_fences rows")
	// The lease records (lock-delay): one per held lock id, with its
	// lease's token; expires (server time) is checked to lie after the
	// grant, not printed.
	dumpLeases := func(title string) {
		out.WriteString("\n# " + title + "\n")
		rows, err := pool.Query(ctx, `SELECT id, token, expires > now() FROM lockkit_leases ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var tok string
			var later bool
			if err := rows.Scan(&id, &tok, &later); err != nil {
				t.Fatal(err)
			}
			out.WriteString(n.apply(fmt.Sprintf("lockkit_leases id=%d token=%s expires_after_grant=%v\n", id, tok, later)))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	dumpLeases("held: lockkit_leases rows")
	for _, l := range leases {
		releaseLease(t, ctx, l)
	}
	dumpFences("released: lockkit_fences rows stay")
	dumpLeases("released: lockkit_leases rows are deleted")

	for _, q := range []struct{ label, sql string }{
		{"", `SELECT '# lockkit_fences: columns and constraints'`},
		{"column", `SELECT column_name || ' ' || data_type || ' nullable=' || is_nullable FROM information_schema.columns
			WHERE table_name = 'lockkit_fences' ORDER BY ordinal_position`},
		{"constraint", `SELECT contype::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = 'lockkit_fences'::regclass ORDER BY contype, pg_get_constraintdef(oid)`},
		{"", `SELECT '# lockkit_leases: columns and constraints'`},
		{"column", `SELECT column_name || ' ' || data_type || ' nullable=' || is_nullable FROM information_schema.columns
			WHERE table_name = 'lockkit_leases' ORDER BY ordinal_position`},
		{"constraint", `SELECT contype::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = 'lockkit_leases'::regclass ORDER BY contype, pg_get_constraintdef(oid)`},
	} {
		rows, err := pool.Query(ctx, q.sql)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if q.label == "" {
				out.WriteString("\n" + l + "\n")
				continue
			}
			out.WriteString(q.label + " " + l + "\n")
		}
	}
	compareGolden(t, "postgres", out.String())
}
