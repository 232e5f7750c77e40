package faultharness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/internal/holder"

	"github.com/anishathalye/porcupine"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/internal/testserver"
)

const (
	lockKey    = "lock:{booking}" // the worker's lock: domain prefix "lock:", key "booking"
	counterKey = lockKey + ":fence"
	resKey     = "res:booking"
	pgRow      = "harness"

	ttl         = time.Second
	workers     = 5
	resumeBound = 30 * time.Second // generous: a loaded 2-core machine, a CPU hog
	holdFor     = 15 * time.Second // longest wait for a worker to become a holder
	hangBound   = 20 * time.Second // longest silence of a running worker
)

// lockFlags make every lock server's AOF its record of grants: every write
// fsynced before the reply, no rewrites (they would drop the history), and a
// base file in RESP (a replica's, after a full sync), which the checker reads.
var lockFlags = testserver.WithArgs(
	"--appendonly", "yes", "--appendfsync", "always",
	"--aof-use-rdb-preamble", "no", "--auto-aof-rewrite-percentage", "0",
)

// lockServer is the lock deployment: a primary, a replica, one Sentinel.
// epochs are the AOF directories of primaries that are gone (killed then
// restarted empty, or failed over), in order.
type lockServer struct {
	primary, replica *testserver.Redis
	sentinel         *testserver.Sentinel
	epochs           []string
	archived         int
}

func (ls *lockServer) startReplica(t *testing.T) {
	t.Helper()
	ls.replica = testserver.StartReplica(t, ls.primary, lockFlags)
}

// cutReplication stops the replica from receiving anything more while both
// keep running: the replica is told a password the primary does not have,
// and its link is killed, so each reconnection fails at AUTH. Its master
// address stays the same, so Sentinel sees nothing to fix.
func (ls *lockServer) cutReplication(t *testing.T, prim, repl *redis.Client) {
	t.Helper()
	if err := repl.ConfigSet(t.Context(), "masterauth", "harness-cut-"+strconv.Itoa(os.Getpid())).Err(); err != nil {
		t.Fatal(err)
	}
	if err := prim.Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 15*time.Second, "the replica's link to go down", func() error {
		if s := ls.replica.Info(t, "replication")["master_link_status"]; s != "down" {
			return fmt.Errorf("master_link_status:%s", s)
		}
		return nil
	})
}

// harness is one run: servers, workers, and what the test saw.
type harness struct {
	fleet
	bin, dir string
	flags    []string
	ls       *lockServer
	res      *testserver.Redis
	resRDB   *redis.Client
	db       *sql.DB
	live     []*workerProc // current incarnation per worker id
	faults   []Fault
	stops    map[*workerProc][][2]int64 // when the test had a worker stopped
	next     int                        // round robin over workers for holder faults
	notes    []string
	pgDSN    string
}

func TestFaultHarness(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireSentinel(t)
	testserver.RequirePostgres(t)
	t.Parallel() // alongside TestFaultHarnessKinds
	soak := os.Getenv("LOCKKIT_SOAK") == "1"
	duration := time.Duration(0)
	if soak {
		duration = 10 * time.Minute
		if s := os.Getenv("LOCKKIT_SOAK_DURATION"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				t.Fatalf("LOCKKIT_SOAK_DURATION=%q: want a Go duration such as 10m", s)
			}
			duration = d
		}
		if dl, ok := t.Deadline(); ok && time.Until(dl) < duration+3*time.Minute {
			t.Fatalf("LOCKKIT_SOAK_DURATION=%v does not fit in go test's -timeout (%v left): pass -timeout %v",
				duration, time.Until(dl).Round(time.Second), (duration + 5*time.Minute).Round(time.Minute))
		}
	}
	began := time.Now()
	h := &harness{fleet: fleet{t: t, tail: newTailer()}, dir: t.TempDir(), stops: map[*workerProc][][2]int64{}}
	if d := os.Getenv("LOCKKIT_HARNESS_DIR"); d != "" {
		// Keep the workers' histories and stderr for a look afterwards, in
		// a new directory for each run.
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if h.dir, err = os.MkdirTemp(d, "run-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("histories and stderr in %s", h.dir)
	}
	h.bin = buildWorker(t)
	built := time.Since(began)
	h.startServers()
	h.flags = []string{
		"-sentinel", h.ls.sentinel.Addr(), "-master", h.ls.sentinel.MasterName(),
		"-res-redis", h.res.Addr(), "-res-key", resKey, "-pg", h.pgDSN, "-table", "bookings", "-row", pgRow,
		"-ttl", ttl.String(),
	}
	if m := os.Getenv("LOCKKIT_HARNESS_MUTATE"); m != "" {
		h.flags = append(h.flags, "-mutate", m)
		t.Logf("MUTATION %q: the workers are broken on purpose; this run must fail", m)
	}
	for id := range workers {
		w := startWorker(t, h.bin, h.dir, id, 0, h.flags)
		h.procs = append(h.procs, w)
		h.live = append(h.live, w)
	}
	stopTail := h.startTailing()
	h.waitGrants(20, "warm-up")

	faultsStart := time.Now()
	cycles := 0
	for {
		if cycles > 0 {
			h.prepareNextCycle()
		}
		h.cycle(cycles)
		cycles++
		if !soak || time.Since(faultsStart) > duration {
			break
		}
	}
	h.settle("the last fault")
	faultTime := time.Since(faultsStart)

	// Stop every worker: each must exit cleanly, promptly, without a panic.
	var liveness []string
	for _, w := range h.live {
		if err := w.terminate(15 * time.Second); err != nil {
			liveness = append(liveness, fmt.Sprintf("worker %d.%d (pid %d): %v", w.id, w.inc, w.pid, err))
		}
	}
	stopTail()
	for _, w := range h.procs {
		if p := w.stderrProblems(); p != "" {
			liveness = append(liveness, fmt.Sprintf("worker %d.%d (pid %d) stderr:\n%s", w.id, w.inc, w.pid, p))
		}
	}
	in := h.collect()
	liveness = append(liveness, silences(h.procs, h.stops, in.Histories)...)

	rep := Check(in)
	rep.Violations = append(rep.Violations, liveness...)
	lin := map[string]string{}
	linTimeout := time.Minute
	if soak {
		linTimeout = 5 * time.Minute
	}
	for _, res := range []string{ResRedis, ResPG} {
		ops := Operations(in.Histories, res)
		start := time.Now()
		viz := filepath.Join(os.TempDir(), fmt.Sprintf("lockkit-harness-%s-%d.html", res, time.Now().Unix()))
		switch r := CheckLinearizable(ops, linTimeout, viz); r {
		case porcupine.Illegal:
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: the workers' operations are not linearizable as a fenced register (porcupine; visualization: %s)", res, viz))
			lin[res] = "ILLEGAL"
		case porcupine.Unknown:
			lin[res] = fmt.Sprintf("unknown (timed out after %v)", linTimeout)
		default:
			lin[res] = fmt.Sprintf("ok (%d operations, %v)", len(ops), time.Since(start).Round(time.Millisecond))
		}
	}
	h.report(rep, lin, cycles, built, faultTime, time.Since(began))
	for class, n := range violationClasses(rep.Violations) {
		t.Logf("violations: %d× %s", n, class)
	}
	for i, v := range rep.Violations {
		if i == 40 {
			t.Errorf("… and %d more violations", len(rep.Violations)-i)
			break
		}
		t.Error(v)
	}
}

func (h *harness) startServers() {
	t := h.t
	ls := &lockServer{primary: testserver.StartRedis(t, lockFlags)}
	ls.startReplica(t)
	ls.sentinel = testserver.StartSentinel(t, ls.primary, "locks", 1)
	// Only the test fails the primary over: Sentinel must not do it on its
	// own while the primary is paused or restarting.
	if err := ls.sentinel.Client(t).Do(t.Context(), "SENTINEL", "SET", "locks", "down-after-milliseconds", "60000").Err(); err != nil {
		t.Fatal(err)
	}
	h.ls = ls

	h.res = testserver.StartRedis(t, testserver.WithAppendOnly(),
		testserver.WithArgs("--aof-use-rdb-preamble", "no", "--auto-aof-rewrite-percentage", "0"))
	h.resRDB = h.res.Client(t)

	pg := testserver.StartPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, stmt := range []string{
		`CREATE TABLE bookings (id text PRIMARY KEY, guest text, fence bigint)`,
		`INSERT INTO bookings (id) VALUES ('` + pgRow + `')`,
		// The resource's own record: a trigger appends every applied update
		// in the same transaction. It runs while the update holds the row
		// lock, which the next update waits for until commit, so seq is the
		// order the row's updates committed in.
		`CREATE TABLE booking_log (seq bigserial PRIMARY KEY, id text, guest text, fence bigint, at timestamptz)`,
		`CREATE FUNCTION log_booking() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO booking_log (id, guest, fence, at) VALUES (NEW.id, NEW.guest, NEW.fence, clock_timestamp());
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER bookings_log AFTER UPDATE ON bookings FOR EACH ROW EXECUTE FUNCTION log_booking()`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	h.db = db
	h.pgDSN = pg.DSN()
}

// settle lets the workers run on after a fault: at least a second and
// five grants.
func (h *harness) settle(what string) {
	h.t.Helper()
	time.Sleep(time.Second)
	h.waitGrants(5, "after "+what)
}

// cycle injects every fault once. The failover is last: after it the
// promoted replica is the primary, and a new replica is started for the
// next cycle.
func (h *harness) cycle(n int) {
	h.t.Logf("fault cycle %d", n)
	h.pauseHolder(ResRedis)
	h.settle("pause-holder")
	h.pauseHolder(ResPG)
	h.settle("pause-holder")
	h.stopHolder()
	h.settle("stop-holder")
	h.killHolder()
	h.settle("kill-holder")
	h.pauseServer()
	h.settle("pause-server")
	h.restartEmpty()
	h.settle("restart-empty")
	h.failover()
	h.settle("failover")
}

// pickWorker is the next live worker, round robin.
func (h *harness) pickWorker() *workerProc {
	w := h.live[h.next%len(h.live)]
	h.next++
	return w
}

// pauseHolder: a worker stops itself (SIGSTOP) right after checking its
// lease, before its write to res; the test keeps it stopped past its TTL
// and until a newer lease has written to res, then resumes it (SIGCONT).
// Its write then arrives late and must be fenced off.
func (h *harness) pauseHolder(res string) {
	t := h.t
	w := h.pickWorker()
	sig := syscall.SIGUSR1
	if res == ResPG {
		sig = syscall.SIGUSR2
	}
	f := Fault{Kind: "pause-holder", Worker: w.id, Res: res}
	if err := w.signal(sig); err != nil {
		t.Fatalf("pause-holder: worker %d: %v", w.id, err)
	}
	var ev Event
	waitUntil(t, holdFor, fmt.Sprintf("worker %d to take the lock and stop itself before writing to %s", w.id, res), func() error {
		if !w.stopped() {
			return errors.New("not stopped")
		}
		h.tail.poll([]*workerProc{w})
		e, ok := h.tail.selfstop(w)
		if !ok || e.Res != res {
			return errors.New("stopped, but its history has no selfstop yet")
		}
		ev = e
		return nil
	})
	f.Start, f.Token, f.Fence = time.Now().UnixNano(), ev.Tok, ev.Fence
	h.keepStopped(w, f.Start, func() error { return h.newerWrite(res, f.Fence) })
	f.End = time.Now().UnixNano()
	h.addStop(w, f.Start, f.End)
	h.faults = append(h.faults, f)
}

// keepStopped waits at least 2.5 TTLs, and until cond holds (bounded), with
// w stopped, then resumes it.
func (h *harness) keepStopped(w *workerProc, since int64, cond func() error) {
	t := h.t
	time.Sleep(time.Until(time.Unix(0, since).Add(ttl * 5 / 2)))
	waitUntil(t, resumeBound, fmt.Sprintf("a newer lease to write while worker %d is stopped", w.id), cond)
	if err := w.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT worker %d: %v", w.id, err)
	}
}

// newerWrite passes once res holds a write whose fence is above the given one.
func (h *harness) newerWrite(res string, above int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var f int64
	var err error
	if res == ResRedis {
		_, f, err = fence.Get(ctx, h.resRDB, resKey)
	} else {
		err = h.db.QueryRowContext(ctx, `SELECT coalesce(fence, 0) FROM bookings WHERE id = $1`, pgRow).Scan(&f)
	}
	if err != nil {
		return err
	}
	if f <= above {
		return fmt.Errorf("%s's fence is %d, not above %d yet", res, f, above)
	}
	return nil
}

// currentHolder finds the worker that holds the lock now: the lock server's
// key names the lease token, the workers' histories name its worker.
func (h *harness) currentHolder(what string) (*workerProc, string, int64) {
	t := h.t
	rdb := redis.NewClient(&redis.Options{Addr: h.ls.primary.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	var (
		w   *workerProc
		tok string
		fen int64
	)
	waitUntil(t, holdFor, what+": a worker holding the lock", func() error {
		v, err := rdb.Get(t.Context(), lockKey).Result()
		if err != nil {
			return err
		}
		v, _, _ = holder.Decode(v) // the token, without who holds it
		h.tail.poll(h.procsSnapshot())
		hw, f := h.tail.holder(v)
		if hw == nil || hw.exited() || hw.stopped() {
			return fmt.Errorf("lease %s: its worker is not known yet", v)
		}
		w, tok, fen = hw, v, f
		return nil
	})
	return w, tok, fen
}

// stopHolder: the test SIGSTOPs whichever worker holds the lock, wherever it
// is in its section, past its TTL and until newer leases wrote to both
// resources.
func (h *harness) stopHolder() {
	w, tok, fence := h.currentHolder("stop-holder")
	if err := w.signal(syscall.SIGSTOP); err != nil {
		h.t.Fatalf("SIGSTOP worker %d: %v", w.id, err)
	}
	f := Fault{Kind: "stop-holder", Worker: w.id, Token: tok, Fence: fence, Start: time.Now().UnixNano()}
	h.keepStopped(w, f.Start, func() error {
		return errors.Join(h.newerWrite(ResRedis, fence), h.newerWrite(ResPG, fence))
	})
	f.End = time.Now().UnixNano()
	h.addStop(w, f.Start, f.End)
	h.faults = append(h.faults, f)
}

// killHolder: SIGKILL the holder mid-section, then start it again.
func (h *harness) killHolder() {
	w, tok, fence := h.currentHolder("kill-holder")
	f := Fault{Kind: "kill-holder", Worker: w.id, Token: tok, Fence: fence, Start: time.Now().UnixNano()}
	w.killed = true
	w.kill()
	if !w.exited() {
		h.t.Fatalf("worker %d (pid %d) survived SIGKILL", w.id, w.pid)
	}
	nw := startWorker(h.t, h.bin, h.dir, w.id, w.inc+1, h.flags)
	h.addProc(nw)
	h.live[slices.Index(h.live, w)] = nw
	f.End = time.Now().UnixNano()
	h.faults = append(h.faults, f)
}

// pauseServer: SIGSTOP the lock server's primary past the TTL: every lease
// runs out while nobody can renew.
func (h *harness) pauseServer() {
	f := Fault{Kind: "pause-server", Worker: -1, Start: time.Now().UnixNano()}
	h.ls.primary.Pause(h.t)
	time.Sleep(ttl * 5 / 2)
	h.ls.primary.Resume(h.t)
	f.End = time.Now().UnixNano()
	h.faults = append(h.faults, f)
}

// restartEmpty: kill -9 the primary and start it again with no data; its
// AOF directory is kept aside for the checker.
func (h *harness) restartEmpty() {
	ls := h.ls
	f := Fault{Kind: "restart-empty", Worker: -1, Start: time.Now().UnixNano()}
	ls.primary.Kill(h.t)
	ls.archived++
	kept := filepath.Join(ls.primary.Dir(), fmt.Sprintf("appendonlydir.epoch%d", ls.archived))
	if err := os.Rename(filepath.Join(ls.primary.Dir(), "appendonlydir"), kept); err != nil {
		h.t.Fatal(err)
	}
	ls.epochs = append(ls.epochs, kept)
	ls.primary.Restart(h.t)
	f.End = time.Now().UnixNano()
	h.faults = append(h.faults, f)
}

// failover: cut the replica's link, let the primary grant more leases than
// the replica has seen, kill the primary and have Sentinel promote the
// lagging replica.
func (h *harness) failover() {
	t := h.t
	ls := h.ls
	f := Fault{Kind: "failover", Worker: -1, Start: time.Now().UnixNano()}
	prim := redis.NewClient(&redis.Options{Addr: ls.primary.Addr(), ContextTimeoutEnabled: true})
	defer prim.Close()
	repl := redis.NewClient(&redis.Options{Addr: ls.replica.Addr(), ContextTimeoutEnabled: true})
	defer repl.Close()
	ls.cutReplication(t, prim, repl)
	var pc, rc int64
	waitUntil(t, resumeBound, "the primary to grant leases the cut-off replica misses", func() error {
		var err error
		if pc, err = prim.Get(t.Context(), counterKey).Int64(); err != nil {
			return err
		}
		if rc, err = repl.Get(t.Context(), counterKey).Int64(); err != nil && err != redis.Nil {
			return err
		}
		if pc < rc+3 {
			return fmt.Errorf("primary's counter %d, replica's %d", pc, rc)
		}
		return nil
	})
	ls.primary.Kill(t)
	// Read the replica's counter again: the primary is gone, nothing more
	// can reach it.
	if v, err := repl.Get(t.Context(), counterKey).Int64(); err == nil {
		rc = v
	}
	f.Note = fmt.Sprintf("replica's counter %d, primary's at least %d", rc, pc)
	ls.epochs = append(ls.epochs, filepath.Join(ls.primary.Dir(), "appendonlydir"))
	newAddr := ls.sentinel.Failover(t)
	if newAddr != ls.replica.Addr() {
		t.Fatalf("sentinel promoted %s, want the replica %s", newAddr, ls.replica.Addr())
	}
	f.End = time.Now().UnixNano()
	h.faults = append(h.faults, f)
	ls.primary = ls.replica
	ls.primary.ForgetReplicaOf(t)
	ls.replica = nil
}

// prepareNextCycle gives the promoted primary a new replica for the next
// cycle's failover, and waits until Sentinel knows it.
func (h *harness) prepareNextCycle() {
	t := h.t
	ls := h.ls
	ls.startReplica(t)
	sc := ls.sentinel.Client(t)
	waitUntil(t, 40*time.Second, "sentinel to discover the new replica", func() error {
		v, err := sc.Do(t.Context(), "SENTINEL", "REPLICAS", "locks").Slice()
		if err != nil {
			return err
		}
		for _, r := range v {
			fields := map[string]string{}
			switch r := r.(type) {
			case []any:
				for i := 0; i+1 < len(r); i += 2 {
					fields[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
				}
			case map[any]any:
				for k, v := range r {
					fields[fmt.Sprint(k)] = fmt.Sprint(v)
				}
			}
			if fields["port"] == strconv.Itoa(ls.replica.Port()) && !strings.Contains(fields["flags"], "down") {
				return nil
			}
		}
		return errors.New("not yet")
	})
}

func (h *harness) addStop(w *workerProc, from, to int64) {
	h.stops[w] = append(h.stops[w], [2]int64{from, to})
}

// collect reads the records: the lock servers' AOFs (every epoch, then the
// current primary's), the Redis resource's AOF, the PostgreSQL log, and the
// workers' histories.
func (h *harness) collect() Input {
	t := h.t
	in := Input{Writes: map[string][]Write{}, Faults: h.faults, ResumeBound: resumeBound}
	dirs := append(slices.Clone(h.ls.epochs), filepath.Join(h.ls.primary.Dir(), "appendonlydir"))
	for i, d := range dirs {
		cmds, err := ReadAOF(d)
		if err != nil {
			t.Fatalf("lock server AOF %s: %v", d, err)
		}
		g, err := GrantsFromAOF(cmds, lockKey, counterKey, i)
		if err != nil {
			t.Fatalf("lock server AOF %s: %v", d, err)
		}
		in.Grants = append(in.Grants, g)
	}
	cmds, err := ReadAOF(filepath.Join(h.res.Dir(), "appendonlydir"))
	if err != nil {
		t.Fatalf("resource AOF: %v", err)
	}
	if in.Writes[ResRedis], err = WritesFromAOF(cmds, resKey); err != nil {
		t.Fatalf("resource AOF: %v", err)
	}
	rows, err := h.db.QueryContext(t.Context(), `SELECT seq, coalesce(guest, ''), coalesce(fence, 0) FROM booking_log WHERE id = $1 ORDER BY seq`, pgRow)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var w Write
		var seq int64
		if err := rows.Scan(&seq, &w.Value, &w.Fence); err != nil {
			t.Fatal(err)
		}
		w.Pos = int(seq)
		in.Writes[ResPG] = append(in.Writes[ResPG], w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range h.procs {
		evs, err := ReadHistory(w.hist)
		if err != nil {
			t.Fatalf("worker %d.%d history: %v", w.id, w.inc, err)
		}
		in.Histories = append(in.Histories, evs)
	}
	return in
}

// silences reports a running worker that recorded nothing for longer than
// hangBound (time the test kept it stopped does not count).
func silences(procs []*workerProc, stops map[*workerProc][][2]int64, hists [][]Event) []string {
	var out []string
	for i, w := range procs {
		evs := hists[i]
		for j := 1; j < len(evs); j++ {
			gap := evs[j].T - evs[j-1].T
			for _, s := range stops[w] {
				if s[0] < evs[j].T && s[1] > evs[j-1].T {
					gap -= min(s[1], evs[j].T) - max(s[0], evs[j-1].T)
				}
			}
			if time.Duration(gap) > hangBound {
				out = append(out, fmt.Sprintf("worker %d.%d recorded nothing for %v (after %q at %s): a hang",
					w.id, w.inc, time.Duration(gap).Round(time.Millisecond), evs[j-1].Ev, time.Unix(0, evs[j-1].T).UTC().Format("15:04:05.000")))
			}
		}
		if len(evs) == 0 || (!w.killed && evs[len(evs)-1].Ev != "exit") {
			out = append(out, fmt.Sprintf("worker %d.%d did not record a clean exit", w.id, w.inc))
		}
	}
	return out
}

func (h *harness) report(r *Report, lin map[string]string, cycles int, built, faultTime, total time.Duration) {
	t := h.t
	t.Logf("workers %d (%d processes incl. restarts), fault cycles %d, faults %d, worker build %v, fault phase %v, total %v",
		workers, len(h.procs), cycles, len(r.Faults), built.Round(time.Second), faultTime.Round(time.Second), total.Round(time.Second))
	t.Logf("grants: %d in the lock servers' records (%d AOF epochs), %d seen by workers, %d never reported (reply lost or too late); acquisitions failed: %v; leases lost during a section: %d",
		r.Grants, len(h.ls.epochs)+1, r.GrantsSeen, r.GrantsUnclaimed, r.AcqFailures, r.LeasesLost)
	for _, res := range []string{ResRedis, ResPG} {
		t.Logf("%s resource: accepted %d (its record), rejected %d (ErrFenced), errors %d; linearizable: %s",
			res, r.Accepted[res], r.Rejected[res], r.WriteErrors[res], lin[res])
	}
	t.Logf("paused holders' late writes rejected: %d; writes skipped because the lease was found lost: %d", r.LateRejected, r.Skipped)
	for _, f := range r.Faults {
		extra := ""
		if f.Token != "" {
			extra = fmt.Sprintf(" lease fence %d", f.Fence)
		}
		if f.Res != "" {
			extra += " before its write to " + f.Res
		}
		if f.Note != "" {
			extra += "; " + f.Note
		}
		t.Logf("fault %-13s worker %2d lasted %6v, next grant %v after%s", f.Kind, f.Worker,
			time.Duration(f.End-f.Start).Round(time.Millisecond), f.Resume.Round(time.Millisecond), extra)
	}
	t.Logf("max time to the next grant after a fault: %v (bound %v)", r.MaxResume.Round(time.Millisecond), resumeBound)
	for _, n := range h.notes {
		t.Log(n)
	}
}

var (
	digits = regexp.MustCompile(`[0-9]+`)
	tokens = regexp.MustCompile(`[A-Z2-7]{26}`)
	quoted = regexp.MustCompile(`"[^"]*"`)
)

// violationClasses counts violations by their text with numbers, tokens and
// values blanked out.
func violationClasses(vs []string) map[string]int {
	out := map[string]int{}
	for _, v := range vs {
		v, _, _ = strings.Cut(v, "\n")
		c := quoted.ReplaceAllString(tokens.ReplaceAllString(v, "TOKEN"), `"…"`)
		out[digits.ReplaceAllString(c, "N")]++
	}
	return out
}

// waitUntil polls check every 20ms until it passes, failing after d.
func waitUntil(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
