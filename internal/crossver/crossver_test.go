package crossver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// release is one line of releases.txt: a version and its full commit.
type release struct{ version, commit string }

func releases(t *testing.T) []release {
	t.Helper()
	data, err := os.ReadFile("releases.txt")
	if err != nil {
		t.Fatal(err)
	}
	var rs []release
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 || len(f[1]) != 40 {
			t.Fatalf("releases.txt:%d: want \"vX.Y.Z <40-hex commit>\", got %q", i+1, line)
		}
		rs = append(rs, release{f[0], f[1]})
	}
	if len(rs) == 0 {
		t.Fatal("releases.txt names no release")
	}
	return rs
}

// noHistory skips the test outside CI when the release cannot be extracted
// (a shallow clone, a source tarball) and fails it under CI=true, where the
// clone must be full.
func noHistory(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the clone must have full history, e.g. actions/checkout fetch-depth: 0)", msg)
	}
	t.Skipf("%s; skipped outside CI (set CI=true to make this a failure)", msg)
}

// buildOld extracts the tree at r.commit with git archive, drops in the
// worker of testdata/<version>/worker, and builds it with that tree's go.mod.
func buildOld(t *testing.T, r release) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		noHistory(t, "crossver: not in a git checkout (%v)", err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", r.commit+"^{commit}").Run(); err != nil {
		noHistory(t, "crossver: release %s commit %s is not in this clone's history", r.version, r.commit)
	}
	dir := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", r.commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	// One buffer each: exec copies each process's stderr in a goroutine
	// of its own.
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", r.commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v: %s", err, untarErr.String())
	}
	src, err := os.ReadFile(filepath.Join("testdata", r.version, "worker", "main.go"))
	if err != nil {
		t.Fatalf("the worker of %s: %v", r.version, err)
	}
	wdir := filepath.Join(dir, "cmd", "crossver-worker")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wdir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "worker-"+r.version)
	// No -trimpath: the dependencies then build with the test's own flags,
	// so they come from the build cache; only the old tree's packages are
	// compiled. The build is bounded so a stuck toolchain fails clearly.
	bctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	build := exec.CommandContext(bctx, "go", "build", "-o", bin, "./cmd/crossver-worker")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the %s worker at %s: %v\n%s", r.version, r.commit, err, out)
	}
	return bin
}

// store is where a run takes its locks and keeps its resource.
type store struct {
	name string // "redis" or "pg"
	wait string // "poll" or "fifo"
	rdb  *redis.Client
	pool *pgxpool.Pool
	addr string
	dsn  string
}

// The policy both sides use (the old worker has the same literal).
func policy(wait string) lockkit.Policy {
	p := lockkit.Policy{TTL: 5 * time.Second, Fencing: true, Retry: lockkit.Retry{
		Attempts: 100000, Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond, MaxWait: 30 * time.Second}}
	if wait == "fifo" {
		p.Wait = "fifo"
	}
	return p
}

// work is the new side's worker: testdata/<version>/worker's loop on the
// current tree.
func work(ctx context.Context, s store, key, who string, n int) error {
	client, err := newClient(s.rdb, s.pool)
	if err != nil {
		return err
	}
	defer client.Close(ctx)
	d := client.Domain(lockkit.DomainSpec{Name: "crossver", Pattern: "crossver:{key}", Policy: policy(s.wait)})
	lock := d.Key(32).Literal("crossver:").String(key).Lock()
	for range n {
		err := lock.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
			f := lease.Fence()
			if err := record(ctx, s, key, who, "B", f); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
			return record(ctx, s, key, who, "E", f)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", who, err)
		}
	}
	return nil
}

// record is the old worker's record, on the current tree.
func record(ctx context.Context, s store, key, who, ev string, f int64) error {
	entry := fmt.Sprintf("%s %s %d", ev, who, f)
	if s.rdb != nil {
		if err := fence.Set(ctx, s.rdb, "res:"+key, entry, f); err != nil {
			return err
		}
		return s.rdb.RPush(ctx, "res:"+key+":log", entry).Err()
	}
	tag, err := s.pool.Exec(ctx, `UPDATE crossver_res SET fence = $2 WHERE k = $1 AND fence <= $2`, key, f)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("fenced: %s refused at the resource", entry)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO crossver_log (k, who, ev, fence) VALUES ($1, $2, $3, $4)`, key, who, ev, f)
	return err
}

// event is one line of the resource's log.
type event struct {
	ev, who string
	fence   int64
}

func readLog(t *testing.T, ctx context.Context, s store, key string) []event {
	t.Helper()
	var lines []string
	if s.rdb != nil {
		var err error
		if lines, err = s.rdb.LRange(ctx, "res:"+key+":log", 0, -1).Result(); err != nil {
			t.Fatal(err)
		}
	} else {
		rows, err := s.pool.Query(ctx, `SELECT ev || ' ' || who || ' ' || fence FROM crossver_log WHERE k = $1 ORDER BY id`, key)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	evs := make([]event, 0, len(lines))
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("log line %q", l)
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		evs = append(evs, event{f[0], f[1], n})
	}
	return evs
}

// check asserts mutual exclusion at the resource (every B is followed by the
// E of the same holder and fence, before any other B) and strictly
// increasing fences across versions, and returns the sections per holder
// version ("old" or "new": the who prefix).
func check(t *testing.T, evs []event) map[string]int {
	t.Helper()
	sections := map[string]int{}
	var last int64
	lastWho := ""
	for i := 0; i < len(evs); i += 2 {
		b := evs[i]
		if b.ev != "B" {
			t.Fatalf("event %d: %v: a critical section ends that did not begin", i, b)
		}
		if i+1 >= len(evs) {
			t.Fatalf("event %d: %v never ends", i, b)
		}
		e := evs[i+1]
		if e.ev != "E" || e.who != b.who || e.fence != b.fence {
			t.Fatalf("events %d-%d: %v then %v: two holders at once (no mutual exclusion across versions)", i, i+1, b, e)
		}
		if b.fence <= last {
			t.Fatalf("event %d: %v: fence %d is not above the previous section's %d (%s)", i, b, b.fence, last, lastWho)
		}
		last, lastWho = b.fence, b.who
		sections[strings.SplitN(b.who, "-", 2)[0]]++
	}
	return sections
}

// TestCrossVersion runs each recorded release's worker processes against
// the current tree's workers on the same key: first the old version alone,
// then both at once, then the new alone (a rolling deploy), and asserts at
// the resource mutual exclusion and strictly increasing fences across the
// versions, so fences of the new version are above every fence the old one
// issued (fence continuity).
func TestCrossVersion(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequirePostgres(t)
	rs := releases(t)
	bins := make([]string, len(rs))
	for i, rel := range rs {
		bins[i] = buildOld(t, rel) // before the clock of the runs starts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	pg := testserver.StartPostgres(t)
	pool := testserver.PgxPool(t, pg.DSN(), 16)
	if err := migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE crossver_res (k text PRIMARY KEY, fence bigint NOT NULL);
		CREATE TABLE crossver_log (id bigserial PRIMARY KEY, k text NOT NULL, who text NOT NULL, ev text NOT NULL, fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	for i, rel := range rs {
		bin := bins[i]
		for _, s := range []store{
			{name: "redis", wait: "poll", rdb: rdb, addr: r.Addr()},
			{name: "redis", wait: "fifo", rdb: rdb, addr: r.Addr()},
			{name: "pg", wait: "poll", pool: pool, dsn: pg.DSN()},
		} {
			t.Run(rel.version+"/"+s.name+"-"+s.wait, func(t *testing.T) {
				key := rel.version + "-" + s.name + "-" + s.wait
				if s.pool != nil {
					if _, err := pool.Exec(ctx, `INSERT INTO crossver_res (k, fence) VALUES ($1, 0)`, key); err != nil {
						t.Fatal(err)
					}
				}
				old := func(who string, n int) func() error {
					return func() error {
						cmd := exec.CommandContext(ctx, bin, "-store", s.name, "-addr", s.addr, "-dsn", s.dsn,
							"-key", key, "-wait", s.wait, "-n", strconv.Itoa(n), "-who", who)
						out, err := cmd.CombinedOutput()
						if err != nil {
							return fmt.Errorf("%s worker %s: %v\n%s", rel.version, who, err, out)
						}
						return nil
					}
				}
				nw := func(who string, n int) func() error {
					return func() error { return work(ctx, s, key, who, n) }
				}
				phase := func(name string, fns ...func() error) {
					t.Helper()
					var wg sync.WaitGroup
					errs := make([]error, len(fns))
					for i, f := range fns {
						wg.Go(func() { errs[i] = f() })
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
					}
				}
				// counterTTL is the PTTL of the key's fence counter on Redis
				// (docs/wire.md: v0.1.0 leaves none, -1; this version's
				// expires, policy.NextFenceLua): each version's scripts
				// meet the other's counter in the mixed phase.
				counterTTL := func() time.Duration {
					if s.rdb == nil {
						return 0
					}
					ks, err := s.rdb.Keys(ctx, "*"+key+"*:fence").Result()
					if err != nil || len(ks) != 1 {
						t.Fatalf("fence counter of %s: %v %v", key, ks, err)
					}
					return s.rdb.PTTL(ctx, ks[0]).Val()
				}
				start := time.Now()
				phase("old only", old("old-1", 10), old("old-2", 10))
				if d := counterTTL(); s.rdb != nil && d != -1 {
					t.Fatalf("after the old version alone the counter's PTTL is %v, want -1 (no expiry in %s)", d, rel.version)
				}
				before := readLog(t, ctx, s, key)
				phase("old and new", old("old-3", 15), old("old-4", 15), nw("new-1", 15), nw("new-2", 15))
				phase("new only", nw("new-3", 10), nw("new-4", 10))
				if d := counterTTL(); s.rdb != nil && d <= 0 {
					t.Fatalf("after the new version alone the counter's PTTL is %v, want an expiry", d)
				}
				evs := readLog(t, ctx, s, key)
				got := check(t, evs)
				if got["old"] != 50 || got["new"] != 50 {
					t.Fatalf("sections: %v, want 50 old and 50 new", got)
				}
				var oldMax int64
				for _, e := range before {
					oldMax = max(oldMax, e.fence)
				}
				for _, e := range evs[len(before):] {
					if strings.HasPrefix(e.who, "new") && e.fence <= oldMax {
						t.Fatalf("fence continuity: new-version fence %d (%s) is not above %d, the old version's last before the deploy", e.fence, e.who, oldMax)
					}
				}
				interleaved := 0
				for i := 2; i < len(evs); i += 2 {
					if strings.HasPrefix(evs[i].who, "new") != strings.HasPrefix(evs[i-2].who, "new") {
						interleaved++
					}
				}
				t.Logf("%s %s-%s: 100 sections (50 per version), %d version changes between consecutive holders, fences strictly increasing; %v",
					rel.version, s.name, s.wait, interleaved, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}
