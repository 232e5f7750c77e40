package faultharness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	gozk "github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockkit/lockkit/internal/etcdkey"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/postgres"
	"github.com/lockkit/lockkit/zookeeper"
)

// TestFaultHarnessKinds runs the harness over every kind besides the
// Sentinel-backed Redis lock (TestFaultHarness): one subtest per row of
// kinds, each with its own servers, workers (./worker -mode <kind.mode>)
// and faults, checked from the records (the lock server's: PostgreSQL's
// fence log, the Redis AOFs; the resource's: the fenced table's log) by
// Check, CheckFIFO and porcupine. Then, for each kind, a short run with the
// workers broken on purpose (kind.mutation), which the checker must fail.
//
// Adding a kind (etcd, say) is one row here — its servers (start), its
// records (collect), its faults — and one worker mode (worker/kinds.go).
func TestFaultHarnessKinds(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequirePostgres(t)
	t.Parallel() // alongside TestFaultHarness: go test's -parallel bounds them all
	soak, duration := soakDuration(t)
	bin := buildWorker(t)
	// One PostgreSQL server for the runs that do not fault it, a database
	// each; the pg and pgtx runs, which kill and pause it, start their own.
	shared := testserver.StartPostgres(t)
	var runs sync.Mutex
	n := 0
	newDB := func(t *testing.T) string {
		runs.Lock()
		n++
		name := fmt.Sprintf("run%d", n)
		runs.Unlock()
		db, err := sql.Open("pgx", shared.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		return strings.Replace(shared.DSN(), "/postgres?", "/"+name+"?", 1)
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			if k.needs != nil {
				k.needs(t)
			}
			r := runKind(t, k, bin, "", soak, duration, newDB)
			r.report(t)
			for class, n := range violationClasses(r.violations) {
				t.Logf("violations: %d× %s", n, class)
			}
			for i, v := range r.violations {
				if i == 40 {
					t.Errorf("… and %d more violations", len(r.violations)-i)
					break
				}
				t.Error(v)
			}
		})
		if soak {
			continue
		}
		for _, m := range append([]mutRun{{k.mutation, k.mutFaults, k.mutSays}}, k.moreMutations...) {
			k := k
			k.mutation, k.mutFaults, k.mutSays = m.name, m.faults, m.says
			t.Run(k.name+"-mutation-"+k.mutation, func(t *testing.T) {
				t.Parallel()
				if k.needs != nil {
					k.needs(t)
				}
				r := runKind(t, k, bin, k.mutation, false, 0, newDB)
				r.report(t)
				found := 0
				for _, v := range r.violations {
					if strings.Contains(v, k.mutSays) {
						found++
					}
				}
				for class, n := range violationClasses(r.violations) {
					t.Logf("violations (expected): %d× %s", n, class)
				}
				if found == 0 {
					t.Errorf("mutation %s: the checker did not say %q; it said %d other things: %q", k.mutation, k.mutSays, len(r.violations), r.violations)
				}
			})
		}
	}
}

// soakDuration reads LOCKKIT_SOAK and LOCKKIT_SOAK_DURATION.
func soakDuration(t *testing.T) (bool, time.Duration) {
	if os.Getenv("LOCKKIT_SOAK") != "1" {
		return false, 0
	}
	d := 10 * time.Minute
	if s := os.Getenv("LOCKKIT_SOAK_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("LOCKKIT_SOAK_DURATION=%q: want a Go duration such as 10m", s)
		}
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < d+3*time.Minute {
		t.Fatalf("LOCKKIT_SOAK_DURATION=%v does not fit in go test's -timeout (%v left): pass -timeout %v",
			d, time.Until(dl).Round(time.Second), (d + 5*time.Minute).Round(time.Minute))
	}
	return true, d
}

// kind is one row of the harness: what the workers lock, the faults that
// fit it, where its records are.
type kind struct {
	name, mode string
	nkeys      int // locks (and rows: one per lock) a section holds
	needs      func(t testing.TB)
	faultsPG   bool                     // its faults kill and pause PostgreSQL: its run has a server of its own
	start      func(r *krun)            // its servers; sets r.flags
	faults     []string                 // one cycle, in order (faultFns)
	soakFaults []string                 // added to each cycle in a soak only (CI cost; other kinds run them in CI)
	collect    func(r *krun, in *Input) // the lock server's records into in
	late       []string                 // answers that turn a paused holder's late write away
	// mutation breaks the workers on purpose; mutFaults are the faults of
	// its short run, and mutSays what the checker must then say.
	mutation  string
	mutFaults []string
	mutSays   string
	// moreMutations are further mutations, each run like mutation.
	moreMutations []mutRun
	// rows names the resource's rows, when not r0, r1, …
	rows func(r *krun) []string
	// permits: a semaphore's, which CheckPermits holds its resource to.
	permits int
	// check: the kind's own checks of its records, beside Check's (etcd:
	// no grant while quorum was lost).
	check func(r *krun, in *Input) []string
}

// mutRun is one mutation of a kind: the workers' -mutate, the faults of
// its short run, what the checker must say.
type mutRun struct {
	name   string
	faults []string
	says   string
}

var kinds = []kind{
	{
		name: "pg", mode: "pg", nkeys: 1, start: startPG, collect: collectPG, faultsPG: true,
		faults: []string{"pause-holder", "stop-holder", "kill-holder", "stop-waiter", "kill-waiter",
			"pg-terminate", "pg-kill-restart", "pg-pause"},
		mutation: "nofence", mutFaults: []string{"pause-holder"},
		mutSays: "late write",
	},
	{
		name: "pgtx", mode: "pgtx", nkeys: 1, start: startPG, collect: collectPG, faultsPG: true,
		faults: []string{"pause-holder", "stop-holder", "kill-holder", "stop-waiter", "kill-waiter",
			"pg-terminate", "pg-kill-restart", "pg-pause"},
		late:     []string{"fenced", "aborted"},
		mutation: "nofence", mutFaults: []string{"pause-holder"},
		mutSays: "late write",
	},
	{
		name: "fifo", mode: "fifo", nkeys: 1, start: startFIFOKind, collect: collectFIFO,
		faults:   []string{"pause-holder", "stop-holder", "kill-holder", "stop-waiter", "kill-waiter", "pause-head-waiter", "restart-queued"},
		mutation: "nofifo", mutFaults: nil,
		mutSays: "was at the head of the queue",
		// linger writes after its release, as a waiter that took a stale
		// push for a grant would: CheckHeldAt must see it.
		moreMutations: []mutRun{{"linger", nil, "it held no lease then"}},
	},
	{
		name: "doall", mode: "doall", nkeys: 3, needs: testserver.RequireRedisCLI, start: startDoAll, collect: collectDoAll,
		faults:   []string{"pause-holder", "stop-holder", "kill-holder", "stop-waiter", "kill-waiter", "lose-node"},
		mutation: "onefence", mutFaults: nil,
		mutSays: "its lease was granted fence",
	},
	{
		name: "etcd", mode: "etcd", nkeys: 1, needs: func(t testing.TB) { testserver.RequireEtcd(t) },
		start: startEtcd, collect: collectEtcd,
		faults:     []string{"pause-holder", "stop-holder", "kill-holder", "etcd-kill-leader", "etcd-pause-leader", "etcd-quorum-loss"},
		soakFaults: []string{"stop-waiter", "kill-waiter"},
		mutation:   "nofence", mutFaults: []string{"pause-holder"},
		mutSays: "late write",
		check:   checkEtcdQuorum,
	},
	{
		name: "zk", mode: "zk", nkeys: 1, needs: testserver.RequireZooKeeper,
		start: startZK, collect: collectZK,
		faults:     []string{"pause-holder", "stop-holder", "kill-holder", "zk-kill-leader", "zk-pause-leader"},
		soakFaults: []string{"stop-waiter", "kill-waiter"},
		mutation:   "nofence", mutFaults: []string{"pause-holder"},
		mutSays: "late write",
	},
	{
		// The leader is the holder: pause-holder pauses it before a write
		// of its term, stop-holder and kill-holder stop and kill it in its
		// term; restart-lock loses every term's record at once.
		name: "election", mode: "election", nkeys: 1, start: startFIFO, collect: collectElection,
		faults:     []string{"pause-holder", "stop-holder", "kill-holder", "restart-lock"},
		soakFaults: []string{"stop-waiter", "kill-waiter"},
		mutation:   "nofence", mutFaults: []string{"pause-holder"},
		mutSays: "late write",
	},
	{
		name: "semaphore", mode: "semaphore", start: startSemaphore, collect: collectSemaphore,
		rows: semaphoreRows, permits: semPermits,
		faults:     []string{"pause-holder", "stop-holder", "kill-holder", "restart-lock"},
		soakFaults: []string{"stop-waiter", "kill-waiter"},
		mutation:   "nplus1", mutFaults: nil,
		mutSays: "writers at once at the resource",
	},
}

const (
	kindWorkers = 4
	kindTTL     = time.Second
)

// krun is one run of one kind.
type krun struct {
	fleet
	k        kind
	mutation string // the workers' mutation; "" in a run that must pass
	bin, dir string
	flags    []string
	live     []*workerProc
	faults   []Fault
	stops    map[*workerProc][][2]int64
	next     int

	pg   *testserver.Postgres // the resource's server when the run faults it (pg, pgtx), else nil
	dsn  string               // the resource's database
	db   *sql.DB
	rows []string // resource rows; res(i) names row i

	lock    *testserver.Redis // fifo's lock server
	cluster *testserver.Cluster
	etcd    *testserver.EtcdCluster // etcd's lock servers
	zk      *testserver.ZooKeeper   // zk's lock servers
	keys    []string                // lock keys
	keyNode []int                   // doall: the Cluster node of each key
	quorum  []QuorumLoss            // etcd: the quorum losses, as the running member saw them
	epochs  map[int][]string        // AOF directories moved aside, by node (0: fifo's server)

	// fifo: worker 0's connections go through push, which delays its
	// handover pushes (workerFlags: flags of one worker id, after flags);
	// pausedHanded counts handovers to a waiter while it was stopped.
	push         *pushDelayer
	workerFlags  map[int][]string
	pausedHanded int

	cycles                  int
	setup, faultTime, total time.Duration
	rep                     *Report
	fifo                    FIFOReport
	lin                     map[string]string
	permits                 PermitReport
	in                      *Input // what the checker read
	violations              []string
}

func (r *krun) res(i int) string {
	if len(r.rows) == 1 {
		return ResPG
	}
	return r.rows[i]
}

// runKind runs kind k once; newDB makes a database on the shared
// PostgreSQL server, for a run whose faults leave PostgreSQL alone.
func runKind(t *testing.T, k kind, bin, mutation string, soak bool, duration time.Duration, newDB func(*testing.T) string) *krun {
	began := time.Now()
	r := &krun{fleet: fleet{t: t, name: k.name + ": ", tail: newTailer()}, k: k, bin: bin, mutation: mutation, stops: map[*workerProc][][2]int64{}, epochs: map[int][]string{}}
	// The histories and stderr stay when the run fails (their directory is
	// logged), or in LOCKKIT_HARNESS_DIR when set.
	dir, err := os.MkdirTemp("", "lockkit-harness-"+k.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	r.dir = dir
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("histories and stderr kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if d := os.Getenv("LOCKKIT_HARNESS_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if r.dir, err = os.MkdirTemp(d, "run-"+k.name+"-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("histories and stderr in %s", r.dir)
	}
	for i := range k.nkeys {
		r.rows = append(r.rows, fmt.Sprintf("r%d", i))
	}
	if k.rows != nil {
		r.rows = k.rows(r)
	}
	if mutation == "" && k.faultsPG {
		r.pg = testserver.StartPostgres(t)
		r.dsn = r.pg.DSN()
	} else {
		r.dsn = newDB(t)
	}
	r.startResource()
	k.start(r)
	r.setup = time.Since(began)
	r.flags = append(r.flags, "-mode", k.mode, "-pg", r.dsn, "-table", "bookings", "-rows", strings.Join(r.rows, ","), "-ttl", kindTTL.String())
	if mutation != "" {
		r.flags = append(r.flags, "-mutate", mutation)
		t.Logf("MUTATION %q: the workers are broken on purpose; the checker must fail", mutation)
	}
	n := kindWorkers
	if mutation != "" {
		n = 3 // enough to break the property; cheaper
	}
	for id := range n {
		w := startWorker(t, r.bin, r.dir, id, 0, r.flagsOf(id))
		r.procs = append(r.procs, w)
		r.live = append(r.live, w)
	}
	stopTail := r.startTailing()
	r.waitGrants(5, "warm-up")

	faults := k.faults
	if soak {
		faults = append(slices.Clone(faults), k.soakFaults...)
	}
	if mutation != "" {
		faults = k.mutFaults
	}
	faultsStart := time.Now()
	for {
		t.Logf("%s: fault cycle %d", k.name, r.cycles)
		for _, name := range faults {
			f := faultFns[name](r)
			f.Kind = name
			if f.End == 0 {
				f.End = time.Now().UnixNano()
			}
			r.faults = append(r.faults, f)
			r.settle(name)
		}
		if len(faults) == 0 {
			time.Sleep(3 * time.Second) // the mutation shows without faults
		}
		r.cycles++
		if !soak || time.Since(faultsStart) > duration {
			break
		}
	}
	r.faultTime = time.Since(faultsStart)

	var liveness []string
	for _, w := range r.live {
		if err := w.terminate(15 * time.Second); err != nil {
			liveness = append(liveness, fmt.Sprintf("worker %d.%d (pid %d): %v", w.id, w.inc, w.pid, err))
		}
	}
	stopTail()
	for _, w := range r.procs {
		if p := w.stderrProblems(); p != "" {
			liveness = append(liveness, fmt.Sprintf("worker %d.%d (pid %d) stderr:\n%s", w.id, w.inc, w.pid, p))
		}
	}
	in := r.collect()
	r.in = &in
	liveness = append(liveness, silences(r.procs, r.stops, in.Histories)...)
	r.rep = Check(in)
	r.violations = append(r.rep.Violations, liveness...)
	r.violations = append(r.violations, r.fifo.Violations...)
	if k.check != nil {
		r.violations = append(r.violations, k.check(r, &in)...)
	}
	if k.permits > 0 {
		r.permits = CheckPermits(in.Writes, k.permits)
		r.violations = append(r.violations, r.permits.Violations...)
	}
	r.lin = map[string]string{}
	linTimeout := time.Minute
	if soak {
		linTimeout = 5 * time.Minute
	}
	for i := range r.rows {
		res := r.res(i)
		ops := Operations(in.Histories, res)
		start := time.Now()
		viz := filepath.Join(os.TempDir(), fmt.Sprintf("lockkit-harness-%s-%s-%d.html", k.name, res, time.Now().Unix()))
		switch CheckLinearizable(ops, linTimeout, viz) {
		case porcupine.Illegal:
			r.violations = append(r.violations, fmt.Sprintf("%s: the workers' operations are not linearizable as a fenced register (porcupine; visualization: %s)", res, viz))
			r.lin[res] = "ILLEGAL"
		case porcupine.Unknown:
			r.lin[res] = fmt.Sprintf("unknown (timed out after %v)", linTimeout)
		default:
			r.lin[res] = fmt.Sprintf("ok (%d operations, %v)", len(ops), time.Since(start).Round(time.Millisecond))
		}
	}
	r.total = time.Since(began)
	return r
}

// startResource starts the PostgreSQL server of the resource: a fenced
// table (fence.Table: id, guest, fence) with one row per lock, and its
// record, a log table appended by a trigger in each update's transaction.
func (r *krun) startResource() {
	t := r.t
	db, err := sql.Open("pgx", r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	stmts := []string{
		`CREATE TABLE bookings (id text PRIMARY KEY, guest text, fence bigint)`,
		`CREATE TABLE booking_log (seq bigserial PRIMARY KEY, id text, guest text, fence bigint, at timestamptz)`,
		`CREATE FUNCTION log_booking() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO booking_log (id, guest, fence, at) VALUES (NEW.id, NEW.guest, NEW.fence, clock_timestamp());
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER bookings_log AFTER UPDATE ON bookings FOR EACH ROW EXECUTE FUNCTION log_booking()`,
	}
	for _, row := range r.rows {
		stmts = append(stmts, `INSERT INTO bookings (id) VALUES ('`+row+`')`)
	}
	for _, stmt := range stmts {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	r.db = db
}

// startPG: the lock server is the resource's PostgreSQL. Its record of
// grants is a log of lockkit_fences, appended by a trigger in the grant's
// statement (and rolled back with a DoTx's transaction, whose fence may then
// be issued again).
func startPG(r *krun) {
	t := r.t
	if err := postgres.Migrate(t.Context(), testserver.PgxPool(t, r.dsn, 1)); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE grant_log (seq bigserial PRIMARY KEY, key text, fence bigint, pid int, at timestamptz)`,
		`CREATE FUNCTION log_grant() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO grant_log (key, fence, pid, at) VALUES (NEW.key, NEW.fence, pg_backend_pid(), clock_timestamp());
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER lockkit_fences_log AFTER INSERT OR UPDATE ON lockkit_fences FOR EACH ROW EXECUTE FUNCTION log_grant()`,
	} {
		if _, err := r.db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	r.keys = []string{"lock:{booking}"}
}

func collectPG(r *krun, in *Input) {
	t := r.t
	rows, err := r.db.QueryContext(t.Context(), `SELECT seq, fence FROM grant_log WHERE key = $1 ORDER BY seq`, r.keys[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var gs []Grant
	for rows.Next() {
		var g Grant
		var seq int64
		if err := rows.Scan(&seq, &g.Fence); err != nil {
			t.Fatal(err)
		}
		g.Pos = int(seq)
		gs = append(gs, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(gs) == 0 {
		t.Fatalf("no grant of %s in grant_log: is the key right?", r.keys[0])
	}
	in.Grants = [][]Grant{gs}
	in.Tokenless = true
	in.TxGrants = r.k.mode == "pgtx"
}

// startFIFO: a single redis-server with its AOF as the record of grants and
// of the queue.
func startFIFO(r *krun) {
	r.lock = testserver.StartRedis(r.t, lockFlags)
	r.keys = []string{"lock:{booking}"}
	r.flags = append(r.flags, "-lock-redis", r.lock.Addr())
}

func collectFIFO(r *krun, in *Input) {
	in.Regrants = true
	writes := r.timedWrites()
	for i, cmds := range r.lockAOFs() {
		in.Grants = append(in.Grants, r.grantsIn(cmds, r.keys[0], i))
		f := CheckFIFO(cmds, r.keys[0], r.keys[0]+":q", i)
		r.fifo.Grants += f.Grants
		r.fifo.FromQueue += f.FromQueue
		r.fifo.MaxQueue = max(r.fifo.MaxQueue, f.MaxQueue)
		r.fifo.Violations = append(r.fifo.Violations, f.Violations...)
		hold := min(kindTTL, policy.FIFOWaiterTTL) // a grant's PX: a handover's, and an acquire's (TTL)
		r.fifo.Violations = append(r.fifo.Violations, CheckHeldAt(cmds, r.keys[0], policy.FenceKey(r.keys[0]), i, hold, heldSlack, writes)...)
	}
	if r.push == nil || r.mutation != "" {
		return
	}
	r.t.Logf("fifo: worker 0's handover pushes delayed %v: %d, stale on delivery (their token no longer held the lock) %d; handovers to a stopped waiter %d",
		r.push.delay, r.push.delayed.Load(), r.push.stale.Load(), r.pausedHanded)
	if r.push.delayed.Load() == 0 || r.push.stale.Load() == 0 {
		r.t.Errorf("fifo: the delayed-push history did not happen: %d pushes delayed, %d stale", r.push.delayed.Load(), r.push.stale.Load())
	}
}

// heldSlack is how late after the next grant CheckHeldAt lets an accepted
// write land: a holder's write sent while its lease was valid may execute
// a little after the lock server let the lease go (the lease's validity
// ends before the server's TTL; the write takes a round trip).
const heldSlack = 100 * time.Millisecond

// startFIFOKind: startFIFO, and worker 0's connections through a proxy
// that delays its handover pushes (pushDelayer) past the handover's PX.
func startFIFOKind(r *krun) {
	startFIFO(r)
	r.push = startPushDelayer(r.t, r.lock.Addr(), r.keys[0], pushDelay)
	r.workerFlags = map[int][]string{0: {"-lock-redis", r.push.Addr()}}
}

// pushDelay is how late worker 0's handover pushes arrive: past its
// fallback (policy.FIFOFallback), so its next attempt finds a handover
// first, and under a second (go-redis's Pub/Sub ping timeout).
const pushDelay = 600 * time.Millisecond

// flagsOf is a worker's flags: the run's, then its own (the last of a flag
// given twice wins).
func (r *krun) flagsOf(id int) []string {
	return append(slices.Clone(r.flags), r.workerFlags[id]...)
}

// timedWrites reads the resource's record with each write's time.
func (r *krun) timedWrites() []TimedWrite {
	t := r.t
	rows, err := r.db.QueryContext(t.Context(), `SELECT seq, coalesce(guest, ''), coalesce(fence, 0), (extract(epoch from at) * 1000)::bigint FROM booking_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ws []TimedWrite
	for rows.Next() {
		var w TimedWrite
		var seq int64
		if err := rows.Scan(&seq, &w.Value, &w.Fence, &w.At); err != nil {
			t.Fatal(err)
		}
		w.Pos = int(seq)
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ws
}

// lockAOFs reads the commands of the single lock server's AOFs (fifo,
// election, semaphore): each epoch moved aside, then the live one.
func (r *krun) lockAOFs() [][][]string {
	var out [][][]string
	for _, d := range append(slices.Clone(r.epochs[0]), filepath.Join(r.lock.Dir(), "appendonlydir")) {
		cmds, err := ReadAOF(d)
		if err != nil {
			r.t.Fatalf("lock server AOF %s: %v", d, err)
		}
		out = append(out, cmds)
	}
	return out
}

// grantsIn replays key's grants from one epoch's AOF.
func (r *krun) grantsIn(cmds [][]string, key string, epoch int) []Grant {
	g, err := GrantsFromAOF(cmds, key, policy.FenceKey(key), epoch)
	if err != nil {
		r.t.Fatalf("lock server AOF, epoch %d: %v", epoch, err)
	}
	return g
}

// collectElection: the election's key is a lock key; each grant in the
// lock server's AOFs is a term, its fence the term's number.
func collectElection(r *krun, in *Input) {
	for i, cmds := range r.lockAOFs() {
		in.Grants = append(in.Grants, r.grantsIn(cmds, r.keys[0], i))
	}
}

// semPermits is the semaphore kind's permits: fewer than its workers, so
// that permits are contended.
const semPermits = 2

// semaphoreRows: one resource row per permit slot, named by the slot's key
// (Lease.Key), which the permit's fence is for; a run with the nplus1
// mutation has the extra slot's row too.
func semaphoreRows(r *krun) []string {
	n := semPermits
	if r.mutation == "nplus1" {
		n++
	}
	var rows []string
	for i := range n {
		rows = append(rows, policy.PermitKey(semKey, i))
	}
	return rows
}

// semKey is the semaphore's key: the workers' domain prefix and -keys.
const semKey = "lock:{booking}"

// startSemaphore: a single redis-server, its AOF the record of grants of
// every slot.
func startSemaphore(r *krun) {
	startFIFO(r)
	r.keys = r.rows // the lock keys are the slots' (the rows are named by them)
	r.flags = append(r.flags, "-permits", fmt.Sprint(semPermits))
}

// collectSemaphore: each slot is a lock key with its own fence counter.
func collectSemaphore(r *krun, in *Input) {
	in.GrantSets = map[string][][]Grant{}
	for i, cmds := range r.lockAOFs() {
		for _, key := range r.keys {
			in.GrantSets[key] = append(in.GrantSets[key], r.grantsIn(cmds, key, i))
		}
	}
}

// startDoAll: a 3-master Cluster, every node with its AOF; one key on each
// master, so DoAll takes them one by one and a node's loss hits one key of
// a held set.
func startDoAll(r *krun) {
	t := r.t
	r.cluster = testserver.StartCluster(t, 3, lockFlags)
	rdb := r.cluster.Client(t)
	var names []string
	for i := 0; i < 100 && len(r.keys) < 3; i++ {
		key := fmt.Sprintf("lock:{k%d}", i)
		m, err := rdb.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		node := slices.Index(r.cluster.Addrs(), m.Options().Addr)
		if slices.Contains(r.keyNode, node) {
			continue
		}
		r.keys = append(r.keys, key)
		names = append(names, fmt.Sprintf("k%d", i))
		r.keyNode = append(r.keyNode, node)
	}
	if len(r.keys) != 3 || slices.Contains(r.keyNode, -1) {
		t.Fatalf("keys per master: %v on nodes %v", r.keys, r.keyNode)
	}
	r.flags = append(r.flags, "-lock-cluster", strings.Join(r.cluster.Addrs(), ","), "-keys", strings.Join(names, ","))
}

func collectDoAll(r *krun, in *Input) {
	in.GrantSets = map[string][][]Grant{}
	for i, key := range r.keys {
		node := r.keyNode[i]
		dirs := append(slices.Clone(r.epochs[node]), filepath.Join(r.cluster.Nodes()[node].Dir(), "appendonlydir"))
		for e, d := range dirs {
			cmds, err := ReadAOF(d)
			if err != nil {
				r.t.Fatalf("node %d AOF %s: %v", node, d, err)
			}
			g, err := GrantsFromAOF(cmds, key, key+":fence", e)
			if err != nil {
				r.t.Fatalf("node %d AOF %s: %v", node, d, err)
			}
			in.GrantSets[key] = append(in.GrantSets[key], g)
		}
	}
}

// startEtcd: a 3-member etcd cluster (500ms election timeout: leader
// changes take about a second, and leases of 1s are kept). Its record of
// grants is its own MVCC history, which the harness never compacts.
func startEtcd(r *krun) {
	r.etcd = testserver.StartEtcd(r.t, r.members())
	r.keys = []string{"lock:{booking}"}
	r.flags = append(r.flags, "-lock-etcd", r.etcd.EndpointsString())
}

// collectEtcd reads every revision of the lock's keys from etcd's MVCC
// history (a watch from revision 1): a polling acquire writes its key only
// when the lock has no key, so each creation is a grant, to the token its
// value holds (etcdkey.Parse), with its create revision as the fence.
func collectEtcd(r *krun, in *Input) {
	t := r.t
	cli := r.etcd.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start, end := etcdkey.Range(r.keys[0])
	head, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	var gs []Grant
	// A watch from revision 1 replays the history in batches, each under
	// the store's current revision (a response's header says nothing of how
	// far the replay got); a progress notification, sent once the watcher
	// has caught up, says every event up to its revision was delivered.
	// (Reading until a header reached the head lost every batch after the
	// first: a 10-minute soak's "4106 violations", grants the record lacked.)
	wctx := clientv3.WithRequireLeader(ctx)
	wc := cli.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithRev(1))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for caughtUp := false; !caughtUp; {
		var wr clientv3.WatchResponse
		select {
		case <-tick.C:
			_ = cli.RequestProgress(wctx)
			continue
		case r, ok := <-wc:
			if !ok || r.Err() != nil {
				t.Fatalf("etcd history: watch ended before revision %d: %v", head.Header.Revision, r.Err())
			}
			wr = r
		}
		caughtUp = wr.IsProgressNotify() && wr.Header.Revision >= head.Header.Revision
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut || !ev.IsCreate() {
				continue
			}
			tok, _, ok := etcdkey.Parse(r.keys[0], ev.Kv.Key, ev.Kv.Value)
			if !ok {
				t.Fatalf("etcd history: key %q, value %q: not lockkit's layout", ev.Kv.Key, ev.Kv.Value)
			}
			gs = append(gs, Grant{Token: tok, Fence: ev.Kv.CreateRevision, Pos: len(gs)})
		}
	}
	if len(gs) == 0 {
		t.Fatalf("no grant of %s in etcd's history: is the key right?", r.keys[0])
	}
	in.Grants = [][]Grant{gs}
}

// etcdQuorumLoss: with a holder stopped right after its validity check, as
// pause-holder stops it, kill -9 both followers: the leader alone cannot
// commit. 2.5 TTL later start them again (same data), and continue the
// holder once a newer lease wrote. It is two faults: the holder's pause,
// checked as pause-holder's (its late write turned away, its Do not nil),
// and the outage, returned, from the kills until the first member is back
// (the next grant after it is its time to grant again). The running
// member's revision, read after the kills and before the restarts, is what
// checkEtcdQuorum holds the record and the workers' grants to.
func (r *krun) etcdQuorumLoss() Fault {
	t := r.t
	if len(r.etcd.Members) != 3 {
		t.Fatalf("etcd-quorum-loss: needs a cluster of 3 members, this run has %d", len(r.etcd.Members))
	}
	w, ev := r.selfStopped()
	hold := Fault{Kind: "pause-holder", Worker: w.id, Res: ev.Res, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true, Note: "across etcd-quorum-loss"}
	lead := r.etcd.Leader(t, 10*time.Second)
	alive := r.etcd.Members[lead]
	var down []*testserver.EtcdMember
	for i, m := range r.etcd.Members {
		if i != lead {
			m.Kill(t)
			down = append(down, m)
		}
	}
	f := Fault{Worker: -1, Start: time.Now().UnixNano()}
	rev := func() int64 {
		n, err := alive.Revision(5 * time.Second)
		if err != nil {
			t.Fatalf("etcd-quorum-loss: the revision of %s: %v", alive.Name, err)
		}
		return n
	}
	// An acknowledgement a follower sent before its kill may still commit
	// an entry at the leader: read the revision a little later.
	time.Sleep(300 * time.Millisecond)
	q := QuorumLoss{RevLost: rev()}
	q.From = time.Now().UnixNano()
	time.Sleep(time.Until(time.Unix(0, f.Start).Add(kindTTL * 5 / 2)))
	q.RevBack = rev()
	q.To = time.Now().UnixNano()
	down[0].Start(t)
	f.End = time.Now().UnixNano()
	down[1].Start(t)
	r.quorum = append(r.quorum, q)
	f.Note = fmt.Sprintf("%s kept (revision %d), %s and %s killed; quorum back %v after the first restart began, both members back %v later",
		alive.Name, q.RevLost, down[0].Name, down[1].Name, time.Duration(f.End-q.To).Round(time.Millisecond), time.Since(time.Unix(0, f.End)).Round(time.Millisecond))
	r.keepStopped(w, hold.Start, func() error { return r.newerWrite(ev.Res, ev.Fence) })
	hold.End = time.Now().UnixNano()
	r.stops[w] = append(r.stops[w], [2]int64{hold.Start, hold.End})
	r.faults = append(r.faults, hold)
	return f
}

// checkEtcdQuorum holds each quorum loss to CheckQuorumLoss, against etcd's
// history (in.Grants) and the workers' grants.
func checkEtcdQuorum(r *krun, in *Input) []string {
	var out []string
	for _, q := range r.quorum {
		qr := CheckQuorumLoss(q, in.Grants, in.Histories)
		r.t.Logf("quorum loss: %v with 2 of 3 members down, revision %d then and %d at its end; acquisitions failed in it: %v; grants reported in it of earlier commits: %d",
			time.Duration(q.To-q.From).Round(time.Millisecond), q.RevLost, q.RevBack, qr.Failed, qr.EarlierGrants)
		out = append(out, qr.Violations...)
	}
	return out
}

// members is the size of a consensus kind's cluster: 3, or 1 for a
// mutation's run, whose faults leave the servers alone (cheaper in CI).
func (r *krun) members() int {
	if r.mutation != "" {
		return 1
	}
	return 3
}

// startZK: a 3-member ZooKeeper ensemble (tick 100ms; the workers' 1s TTL
// is their session timeout). Its record of grants is its members'
// transaction logs.
func startZK(r *krun) {
	r.zk = testserver.StartZooKeeper(r.t, r.members())
	r.keys = []string{"lock:{booking}"}
	// A command timeout of 500ms, not the workers' 250ms: a fresh ensemble
	// (JVMs still warming up) at a load of ~40 answered creates later than
	// 250ms for 40s, each timeout kept the breaker open, and the warm-up
	// saw no grant (round 6, one CI run of three).
	r.flags = append(r.flags, "-lock-zk", r.zk.ServersString(), "-cmd-timeout", "500ms")
	r.stalled = r.zkChildren
}

// zkChildren lists the lock node's children (name, owner session, creation
// zxid), for a run whose grants did not resume.
func (r *krun) zkChildren() string {
	c, _, err := gozk.Connect(r.zk.Servers(), 5*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	parent := zookeeper.LockPath("/lockkit", r.keys[0])
	names, _, err := c.Children(parent)
	if err != nil {
		return fmt.Sprintf("%s: %v", parent, err)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%d children of %s:", len(names), parent)
	for _, n := range names {
		_, st, err := c.Get(parent + "/" + n)
		if err != nil {
			fmt.Fprintf(&b, " %s (%v);", n, err)
			continue
		}
		fmt.Fprintf(&b, " %s (session %#x, czxid %#x);", n, st.EphemeralOwner, st.Czxid)
	}
	return b.String()
}

// collectZK replays the lock node's children from the members' transaction
// logs (GrantsFromZKLog): each child that became the lowest is a grant. The
// record is what a quorum of the members logged (ReadZKLogs): a deposed
// leader's log keeps proposals that were never committed.
func collectZK(r *krun, in *Input) {
	var dirs []string
	for _, m := range r.zk.Members {
		dirs = append(dirs, m.DataDir)
	}
	txns, uncommitted, err := ReadZKLogs(dirs...)
	if err != nil {
		r.t.Fatalf("zookeeper transaction logs: %v", err)
	}
	r.t.Logf("zk record: %d transactions a quorum of the %d members logged; %d zxids only a minority logged (a deposed leader's uncommitted proposals), left out",
		len(txns), len(dirs), uncommitted)
	parent := zookeeper.LockPath("/lockkit", r.keys[0])
	gs := GrantsFromZKLog(txns, parent)
	if len(gs) == 0 {
		r.t.Fatalf("no grant of %s in %d transactions of the ensemble's logs: is the path right?", parent, len(txns))
	}
	in.Grants = [][]Grant{gs}
	in.Regrants = true
}

func (r *krun) collect() Input {
	t := r.t
	in := Input{Writes: map[string][]Write{}, Faults: r.faults, ResumeBound: resumeBound, LateOutcomes: r.k.late}
	r.k.collect(r, &in)
	rows, err := r.db.QueryContext(t.Context(), `SELECT seq, id, coalesce(guest, ''), coalesce(fence, 0) FROM booking_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var w Write
		var seq int64
		var id string
		if err := rows.Scan(&seq, &id, &w.Value, &w.Fence); err != nil {
			t.Fatal(err)
		}
		w.Pos = int(seq)
		res := r.res(slices.Index(r.rows, id))
		in.Writes[res] = append(in.Writes[res], w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range r.procs {
		evs, err := ReadHistory(w.hist)
		if err != nil {
			t.Fatalf("worker %d.%d history: %v", w.id, w.inc, err)
		}
		in.Histories = append(in.Histories, evs)
	}
	return in
}

func (r *krun) settle(what string) {
	r.t.Helper()
	time.Sleep(time.Second)
	r.waitGrants(3, "after "+what)
}

// newerWrite passes once res's row holds a write whose fence is above the
// given one.
func (r *krun) newerWrite(res string, above int64) error {
	row := r.rows[0]
	if res != ResPG {
		row = res
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var f int64
	if err := r.db.QueryRowContext(ctx, `SELECT coalesce(fence, 0) FROM bookings WHERE id = $1`, row).Scan(&f); err != nil {
		return err
	}
	if f <= above {
		return fmt.Errorf("%s's fence is %d, not above %d yet", res, f, above)
	}
	return nil
}

// allNewer: every row the lease writes has a write above the lease's fence
// (doall: its leases' fences differ per key, so any write by a later
// section; semaphore: the row of its slot, key).
func (r *krun) allNewer(key string, above int64) error {
	if slices.Contains(r.rows, key) {
		return r.newerWrite(key, above)
	}
	if len(r.rows) > 1 {
		// A later section's writes: the grant count moved on and the
		// first row's fence is above.
		return r.newerWrite(r.rows[0], above)
	}
	return r.newerWrite(ResPG, above)
}

func (r *krun) keepStopped(w *workerProc, since int64, cond func() error) {
	time.Sleep(time.Until(time.Unix(0, since).Add(kindTTL * 5 / 2)))
	waitUntil(r.t, resumeBound, fmt.Sprintf("a newer lease to write while worker %d is stopped", w.id), cond)
	if err := w.signal(syscall.SIGCONT); err != nil {
		r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
	}
}

// holderInFn finds a live worker inside fn (granted, not yet at fnret),
// stops it (SIGSTOP) and checks it is still inside fn once stopped: its
// lease is then surely held, or lost, while it is in fn.
func (r *krun) holderInFn(what string) (*workerProc, Event) {
	var (
		w  *workerProc
		ev Event
	)
	waitUntil(r.t, holdFor, what+": a worker inside fn", func() error {
		r.tail.poll(r.procsSnapshot())
		for _, c := range r.live {
			if _, ok := r.tail.inFn(c); !ok || c.exited() || c.stopped() {
				continue
			}
			if err := c.signal(syscall.SIGSTOP); err != nil {
				continue
			}
			waitUntil(r.t, 5*time.Second, "SIGSTOP to take", func() error {
				if !c.stopped() {
					return errors.New("running")
				}
				return nil
			})
			r.tail.poll([]*workerProc{c})
			if e, ok := r.tail.inFn(c); ok {
				w, ev = c, e
				return nil
			}
			_ = c.signal(syscall.SIGCONT)
		}
		return errors.New("none inside fn")
	})
	return w, ev
}

// selfStopped asks a worker (round robin) to stop itself before its next
// write (SIGUSR2), and waits until it has. A worker that does not get to
// write within holdFor (polling locks are not fair) has the request
// withdrawn (SIGUSR1), and the next one is asked; three tries.
func (r *krun) selfStopped() (*workerProc, Event) {
	var tried []string
	for range 3 {
		w := r.live[r.next%len(r.live)]
		r.next++
		w.asked = time.Now().UnixNano()
		if err := w.signal(syscall.SIGUSR2); err != nil {
			r.t.Fatalf("pause-holder: worker %d: %v", w.id, err)
		}
		check := func() (Event, error) {
			if !w.stopped() {
				return Event{}, errors.New("not stopped")
			}
			r.tail.poll([]*workerProc{w})
			e, ok := r.tail.selfstop(w)
			if !ok || e.T < w.asked {
				return Event{}, errors.New("stopped, but no selfstop yet")
			}
			return e, nil
		}
		deadline := time.Now().Add(holdFor)
		for time.Now().Before(deadline) {
			if e, err := check(); err == nil {
				return w, e
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = w.signal(syscall.SIGUSR1)
		time.Sleep(200 * time.Millisecond)
		if e, err := check(); err == nil {
			return w, e
		}
		r.tail.poll([]*workerProc{w})
		tried = append(tried, fmt.Sprintf("worker %d.%d (last event %v ago)", w.id, w.inc, time.Since(time.Unix(0, r.tail.last(w))).Round(time.Millisecond)))
	}
	r.t.Fatalf("pause-holder: no worker stopped itself before a write within %v each: %s", holdFor, strings.Join(tried, ", "))
	return nil, Event{}
}

// waiter is a live worker not inside fn (waiting, or between sections).
func (r *krun) waiter() *workerProc {
	r.tail.poll(r.procsSnapshot())
	for range len(r.live) {
		w := r.live[r.next%len(r.live)]
		r.next++
		if _, ok := r.tail.inFn(w); !ok {
			return w
		}
	}
	return r.live[r.next%len(r.live)]
}

func (r *krun) restart(w *workerProc) {
	w.killed = true
	w.kill()
	if !w.exited() {
		r.t.Fatalf("worker %d (pid %d) survived SIGKILL", w.id, w.pid)
	}
	nw := startWorker(r.t, r.bin, r.dir, w.id, w.inc+1, r.flagsOf(w.id))
	r.addProc(nw)
	r.live[slices.Index(r.live, w)] = nw
}

// faultFns are the faults, by name. Each returns the fault as the test saw
// it (Kind and, when unset, End are filled in by the caller).
var faultFns = map[string]func(r *krun) Fault{
	// pause-holder: the worker stops itself right after its validity check,
	// before a write; it stays stopped past its TTL and until a newer lease
	// wrote that row. Its late write must be turned away, and its Do must
	// not return nil.
	"pause-holder": func(r *krun) Fault {
		w, ev := r.selfStopped()
		f := Fault{Worker: w.id, Res: ev.Res, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true}
		r.keepStopped(w, f.Start, func() error { return r.newerWrite(ev.Res, ev.Fence) })
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// stop-holder: SIGSTOP a worker inside fn, past its TTL and until a
	// newer lease wrote.
	"stop-holder": func(r *krun) Fault {
		w, ev := r.holderInFn("stop-holder")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true}
		r.keepStopped(w, f.Start, func() error { return r.allNewer(ev.Key, ev.Fence) })
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// kill-holder: SIGKILL a worker inside fn, start it again.
	"kill-holder": func(r *krun) Fault {
		w, ev := r.holderInFn("kill-holder")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano()}
		r.restart(w)
		return f
	},
	// stop-waiter: SIGSTOP a worker that is not inside fn (a queued waiter
	// in fifo: past the waiter TTL, it is pruned) for 2.5 TTL and 3 grants
	// of the others.
	"stop-waiter": func(r *krun) Fault {
		w := r.waiter()
		if err := w.signal(syscall.SIGSTOP); err != nil {
			r.t.Fatalf("stop-waiter: worker %d: %v", w.id, err)
		}
		f := Fault{Worker: w.id, Start: time.Now().UnixNano()}
		time.Sleep(max(kindTTL*5/2, 2500*time.Millisecond))
		r.waitGrants(3, "with a waiter stopped")
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	"kill-waiter": func(r *krun) Fault {
		w := r.waiter()
		f := Fault{Worker: w.id, Start: time.Now().UnixNano()}
		r.restart(w)
		return f
	},
	// pg-terminate: pg_terminate_backend of the session holding the lock,
	// its worker stopped inside fn meanwhile.
	"pg-terminate": func(r *krun) Fault {
		w, ev := r.holderInFn("pg-terminate")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true}
		var n int
		err := r.db.QueryRowContext(r.t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			r.t.Fatalf("pg-terminate: %v", err)
		}
		f.Note = fmt.Sprintf("%d session(s) terminated", n)
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// pg-kill-restart: kill -9 the postmaster (and its backends) while a
	// worker is stopped inside fn, restart it (crash recovery), resume.
	"pg-kill-restart": func(r *krun) Fault {
		w, ev := r.holderInFn("pg-kill-restart")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true}
		r.pg.Kill(r.t)
		r.pg.Restart(r.t)
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// pg-pause: SIGSTOP the server and its backends past the TTL.
	"pg-pause": func(r *krun) Fault {
		f := Fault{Worker: -1, Start: time.Now().UnixNano()}
		r.pg.Pause(r.t)
		time.Sleep(kindTTL * 5 / 2)
		r.pg.Resume(r.t)
		return f
	},
	// etcd-kill-leader: kill -9 the etcd leader while a worker is stopped
	// inside fn, start it again (same data), resume the worker.
	"etcd-kill-leader": func(r *krun) Fault {
		w, ev := r.holderInFn("etcd-kill-leader")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano()}
		i := r.etcd.Leader(r.t, 10*time.Second)
		m := r.etcd.Members[i]
		f.Note = "leader " + m.Name
		m.Kill(r.t)
		m.Start(r.t)
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// etcd-pause-leader: SIGSTOP the etcd leader past the TTL (the others
	// elect a new one; the workers' requests to it time out), then resume.
	"etcd-pause-leader": func(r *krun) Fault {
		i := r.etcd.Leader(r.t, 10*time.Second)
		m := r.etcd.Members[i]
		f := Fault{Worker: -1, Start: time.Now().UnixNano(), Note: "leader " + m.Name}
		m.Pause(r.t)
		time.Sleep(kindTTL * 5 / 2)
		m.Resume(r.t)
		return f
	},
	// etcd-quorum-loss: see etcdQuorumLoss.
	"etcd-quorum-loss": (*krun).etcdQuorumLoss,
	// zk-kill-leader: kill -9 the ZooKeeper leader while a worker is
	// stopped inside fn, start it again (same data), resume the worker.
	"zk-kill-leader": func(r *krun) Fault {
		w, ev := r.holderInFn("zk-kill-leader")
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano()}
		m := r.zk.Members[r.zk.Leader(r.t, 30*time.Second)]
		f.Note = fmt.Sprintf("leader %d", m.ID)
		m.Kill(r.t)
		m.Start(r.t)
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
	// zk-pause-leader: SIGSTOP the ZooKeeper leader past the TTL (and past
	// syncLimit: the followers elect a new one), then resume it.
	"zk-pause-leader": func(r *krun) Fault {
		m := r.zk.Members[r.zk.Leader(r.t, 30*time.Second)]
		f := Fault{Worker: -1, Start: time.Now().UnixNano(), Note: fmt.Sprintf("leader %d", m.ID)}
		m.Pause(r.t)
		time.Sleep(kindTTL * 5 / 2)
		m.Resume(r.t)
		return f
	},
	// restart-queued: once waiters are queued, kill -9 the lock server and
	// restart it empty (its AOF directory moved aside for the checker).
	"restart-queued": func(r *krun) Fault {
		rdb := redis.NewClient(&redis.Options{Addr: r.lock.Addr(), ContextTimeoutEnabled: true})
		defer rdb.Close()
		var n int64
		waitUntil(r.t, holdFor, "two waiters queued", func() error {
			var err error
			if n, err = rdb.ZCard(r.t.Context(), r.keys[0]+":q").Result(); err != nil {
				return err
			}
			if n < 2 {
				return fmt.Errorf("%d queued", n)
			}
			return nil
		})
		f := r.restartLock()
		f.Note = fmt.Sprintf("%d waiters queued", n)
		return f
	},
	"restart-lock": (*krun).restartLock,
	// lose-node: with a worker stopped inside DoAll's fn, kill -9 the
	// Cluster master of one of its keys and restart it empty (same slots);
	// then resume the worker. Its set lost a key: DoAll must not return nil.
	"lose-node": func(r *krun) Fault {
		w, ev := r.holderInFn("lose-node")
		i := r.next % len(r.keys)
		r.next++
		node := r.cluster.Nodes()[r.keyNode[i]]
		f := Fault{Worker: w.id, Token: ev.Tok, Fence: ev.Fence, Start: time.Now().UnixNano(), Lost: true}
		cl := redis.NewClient(&redis.Options{Addr: node.Addr(), ContextTimeoutEnabled: true})
		v, err := cl.Get(r.t.Context(), r.keys[i]).Result()
		cl.Close()
		tok, _, _ := holder.Decode(v)
		f.Note = fmt.Sprintf("key %s's holder before: %q (%v)", r.keys[i], tok, err)
		node.Kill(r.t)
		r.archive(r.keyNode[i], node)
		node.Restart(r.t)
		r.cluster.WaitOK(r.t)
		if err := w.signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT worker %d: %v", w.id, err)
		}
		f.End = time.Now().UnixNano()
		r.stops[w] = append(r.stops[w], [2]int64{f.Start, f.End})
		return f
	},
}

// restartLock kills -9 the single lock server (fifo, election, semaphore)
// and restarts it empty (its AOF directory moved aside for the checker):
// every lease, term and permit is lost at once.
func (r *krun) restartLock() Fault {
	f := Fault{Worker: -1, Start: time.Now().UnixNano()}
	r.lock.Kill(r.t)
	r.archive(0, r.lock)
	r.lock.Restart(r.t)
	return f
}

// termsWritten counts the terms (fences) in an election's resource record,
// and the most writes one term made there. Check holds each term to one
// lease (no two leases wrote with one fence, each write carries the fence
// the lock server granted its lease) and the terms to increasing.
func termsWritten(ws []Write) (terms, most int) {
	n := map[int64]int{}
	for _, w := range ws {
		n[w.Fence]++
		most = max(most, n[w.Fence])
	}
	return len(n), most
}

// archive moves a killed server's AOF directory aside, for the checker.
func (r *krun) archive(node int, s *testserver.Redis) {
	kept := filepath.Join(s.Dir(), fmt.Sprintf("appendonlydir.epoch%d", len(r.epochs[node])+1))
	if err := os.Rename(filepath.Join(s.Dir(), "appendonlydir"), kept); err != nil {
		r.t.Fatal(err)
	}
	r.epochs[node] = append(r.epochs[node], kept)
}

func (r *krun) report(t *testing.T) {
	rp := r.rep
	t.Logf("%s: workers %d (%d processes incl. restarts), cycles %d, faults %d, servers %v, fault phase %v, total %v",
		r.k.name, len(r.live), len(r.procs), r.cycles, len(rp.Faults), r.setup.Round(time.Second), r.faultTime.Round(time.Second), r.total.Round(time.Second))
	t.Logf("grants: %d in the lock server's records, %d seen by workers; acquisitions failed: %v; leases lost: %d; lost in fn and Do said so: %d",
		rp.Grants, rp.GrantsSeen, rp.AcqFailures, rp.LeasesLost, rp.LostChecked)
	if r.k.mode == "election" {
		terms, most := termsWritten(r.in.Writes[ResPG])
		t.Logf("election: %d terms wrote to the resource (of %d granted), up to %d writes in one term", terms, rp.Grants, most)
	}
	if r.k.permits > 0 {
		t.Logf("permits: %d, most writers at once at the resource %d (at %d of %d accepted writes), %d leases wrote",
			r.k.permits, r.permits.MaxAtOnce, r.permits.AtMax, r.permits.Writes, r.permits.Leases)
	}
	if r.fifo.Grants > 0 {
		t.Logf("fifo: %d grants replayed against the queue, %d to a queued waiter, longest queue %d", r.fifo.Grants, r.fifo.FromQueue, r.fifo.MaxQueue)
	}
	for i := range r.rows {
		res := r.res(i)
		t.Logf("%s: accepted %d (its record), rejected %d (ErrFenced), rolled back %d, errors %d; linearizable: %s",
			res, rp.Accepted[res], rp.Rejected[res], rp.Aborted[res], rp.WriteErrors[res], r.lin[res])
	}
	if rp.Regrants > 0 {
		t.Logf("tokens granted again with a new fence (a handover that ran out unused): %d", rp.Regrants)
	}
	t.Logf("paused holders' late writes turned away: %d; writes skipped (lease found lost): %d", rp.LateRejected, rp.Skipped)
	for _, f := range rp.Faults {
		extra := ""
		if f.Note != "" {
			extra = "; " + f.Note
		}
		t.Logf("fault %-15s worker %2d lasted %6v, next grant %v after%s", f.Kind, f.Worker,
			time.Duration(f.End-f.Start).Round(time.Millisecond), f.Resume.Round(time.Millisecond), extra)
	}
	t.Logf("violations: %d", len(r.violations))
}
