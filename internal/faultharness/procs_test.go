package faultharness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testlog"
)

// buildWorker builds ./worker, with the race detector when this test binary
// has it, once per test binary: every test of the package shares it
// (TestMain removes it).
func buildWorker(t *testing.T) string {
	t.Helper()
	workerBuild.once.Do(func() { workerBuild.path, workerBuild.err = build() })
	if workerBuild.err != nil {
		t.Fatal(workerBuild.err)
	}
	return workerBuild.path
}

var workerBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func build() (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build the worker: %w", err)
	}
	if workerBuild.dir, err = os.MkdirTemp("", "lockkit-harness-worker-"); err != nil {
		return "", err
	}
	out := filepath.Join(workerBuild.dir, "worker")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/lockkit/lockkit/internal/faultharness/worker")
	cmd := exec.Command(goBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if workerBuild.dir != "" {
		os.RemoveAll(workerBuild.dir)
	}
	os.Exit(code)
}

// workerProc is one incarnation of a worker process.
type workerProc struct {
	id, inc  int
	cmd      *exec.Cmd
	pid      int
	hist     string
	errPath  string
	logPath  string // the lockkit client's log lines (-log)
	done     chan struct{}
	err      error // cmd.Wait's; read after done
	killed   bool  // by the test, on purpose
	asked    int64 // when the test last asked it to stop itself (Unix ns)
	exitedBy string
}

func startWorker(t *testing.T, bin, dir string, id, inc int, flags []string) *workerProc {
	t.Helper()
	w := &workerProc{
		id: id, inc: inc,
		hist:    filepath.Join(dir, fmt.Sprintf("history-w%d.%d.jsonl", id, inc)),
		errPath: filepath.Join(dir, fmt.Sprintf("stderr-w%d.%d.log", id, inc)),
		logPath: filepath.Join(dir, fmt.Sprintf("lockkit-w%d.%d.log", id, inc)),
		done:    make(chan struct{}),
	}
	ef, err := os.Create(w.errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	args := append([]string{"-id", fmt.Sprint(id), "-inc", fmt.Sprint(inc), "-history", w.hist, "-log", w.logPath}, flags...)
	w.cmd = exec.Command(bin, args...)
	w.cmd.Stdout, w.cmd.Stderr = ef, ef
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start worker %d: %v", id, err)
	}
	w.pid = w.cmd.Process.Pid
	go func() { w.err = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() { w.kill() })
	// A worker is signalled only once it catches its signals, which it does
	// before its "start" event: a SIGUSR2 sent while a worker under load was
	// still starting killed it before its history existed (CI's
	// etcd-mutation-nofence).
	deadline := time.Now().Add(startWithin)
	for {
		if evs, _ := ReadHistory(w.hist); len(evs) > 0 && evs[0].Ev == "start" {
			return w
		}
		if w.exited() {
			t.Fatalf("worker %d.%d (pid %d) exited while starting: %v; stderr in %s", id, inc, w.pid, w.err, w.errPath)
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %d.%d (pid %d) wrote no start event within %v", id, inc, w.pid, startWithin)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startWithin bounds a worker's start (a race-built binary, on a loaded
// machine).
const startWithin = 30 * time.Second

func (w *workerProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *workerProc) signal(sig syscall.Signal) error {
	if w.exited() {
		return errors.New("exited")
	}
	return syscall.Kill(w.pid, sig)
}

// kill SIGCONTs and SIGKILLs the worker by its PID, and reaps it.
func (w *workerProc) kill() {
	if w.exited() {
		return
	}
	_ = syscall.Kill(w.pid, syscall.SIGCONT)
	_ = syscall.Kill(w.pid, syscall.SIGKILL)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
	}
}

// stopped reports whether the process is in the stopped state (T).
func (w *workerProc) stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// terminate sends SIGTERM and waits up to d for a clean exit.
func (w *workerProc) terminate(d time.Duration) error {
	if w.exited() {
		return fmt.Errorf("had already exited: %v", w.err)
	}
	_ = syscall.Kill(w.pid, syscall.SIGCONT)
	if err := syscall.Kill(w.pid, syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-w.done:
		return w.err
	case <-time.After(d):
		w.kill()
		return fmt.Errorf("did not exit within %v of SIGTERM (a hang); killed", d)
	}
}

// stderrProblems returns what the worker's stderr says that must never be
// there: a panic, a data race, a fatal runtime error; and, in a hashed run
// (internal/testlog), the lines of its client's log that quote a raw key.
func (w *workerProc) stderrProblems() string {
	b, _ := os.ReadFile(w.errPath)
	for _, bad := range []string{"panic:", "DATA RACE", "fatal error:"} {
		if i := bytes.Index(b, []byte(bad)); i >= 0 {
			end := min(len(b), i+2000)
			return string(b[i:end])
		}
	}
	if !testlog.Hashed() {
		return ""
	}
	f, err := os.Open(w.logPath)
	if errors.Is(err, os.ErrNotExist) {
		return "" // killed before its client was built
	} else if err != nil {
		return fmt.Sprintf("its lockkit log: %v", err)
	}
	defer f.Close()
	raw, err := testlog.RawKeyLines(f)
	if err != nil {
		return fmt.Sprintf("its lockkit log: %v", err)
	}
	if len(raw) > 0 {
		return fmt.Sprintf("%d line(s) of its lockkit log (%s) under KeyHashed quote a raw key, the first: %s", len(raw), w.logPath, raw[0])
	}
	return ""
}

// tailer follows the workers' history files as they grow.
type tailer struct {
	mu      sync.Mutex
	offs    map[string]int64
	partial map[string][]byte
	holders map[string]*workerProc // lease token -> worker
	fences  map[string]int64
	grantTs []int64
	selfs   map[*workerProc]Event // last selfstop per worker
	lastEv  map[*workerProc]int64
	open    map[*workerProc]Event // a section's first grant, until its fnret or done
}

func newTailer() *tailer {
	return &tailer{offs: map[string]int64{}, partial: map[string][]byte{}, holders: map[string]*workerProc{}, fences: map[string]int64{}, selfs: map[*workerProc]Event{}, lastEv: map[*workerProc]int64{}, open: map[*workerProc]Event{}}
}

// poll reads what the files gained since the last poll.
func (tl *tailer) poll(ws []*workerProc) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, w := range ws {
		f, err := os.Open(w.hist)
		if err != nil {
			continue
		}
		if _, err := f.Seek(tl.offs[w.hist], io.SeekStart); err == nil {
			b, _ := io.ReadAll(f)
			tl.offs[w.hist] += int64(len(b))
			buf := append(tl.partial[w.hist], b...)
			for {
				i := bytes.IndexByte(buf, '\n')
				if i < 0 {
					break
				}
				var e Event
				if json.Unmarshal(buf[:i], &e) == nil {
					tl.lastEv[w] = e.T
					switch e.Ev {
					case "grant":
						tl.holders[e.Tok] = w
						tl.fences[e.Tok] = e.Fence
						tl.grantTs = append(tl.grantTs, e.T)
						if _, ok := tl.open[w]; !ok {
							tl.open[w] = e
						}
					case "fnret", "done", "acqfail", "exit":
						delete(tl.open, w)
					case "selfstop":
						tl.selfs[w] = e
					}
				}
				buf = buf[i+1:]
			}
			tl.partial[w.hist] = append([]byte(nil), buf...)
		}
		f.Close()
	}
}

func (tl *tailer) grantsAfter(ts int64) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for i := len(tl.grantTs) - 1; i >= 0 && tl.grantTs[i] > ts; i-- {
		n++
	}
	return n
}

func (tl *tailer) holder(tok string) (*workerProc, int64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.holders[tok], tl.fences[tok]
}

func (tl *tailer) selfstop(w *workerProc) (Event, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	e, ok := tl.selfs[w]
	return e, ok
}

// inFn is the first grant of w's section when w is inside fn: granted, and
// neither fnret nor done recorded since.
func (tl *tailer) inFn(w *workerProc) (Event, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	e, ok := tl.open[w]
	return e, ok
}

// last is the time of w's last recorded event.
func (tl *tailer) last(w *workerProc) int64 {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.lastEv[w]
}

// fleet is a run's worker processes, and the tailer that follows their
// histories: shared by TestFaultHarness and TestFaultHarnessKinds.
type fleet struct {
	t     *testing.T
	name  string        // prefixes what the run waits for
	procs []*workerProc // every incarnation, in start order
	mu    sync.Mutex    // guards procs against the tailer
	tail  *tailer
	// stalled, when set, says what the lock server holds when grants
	// did not resume (logged before the run fails).
	stalled func() string
}

func (f *fleet) startTailing() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			f.tail.poll(f.procsSnapshot())
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; f.tail.poll(f.procsSnapshot()) }) }
	f.t.Cleanup(stop) // also when a fault's wait fails the test
	return stop
}

func (f *fleet) procsSnapshot() []*workerProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

func (f *fleet) addProc(w *workerProc) {
	f.mu.Lock()
	f.procs = append(f.procs, w)
	f.mu.Unlock()
}

// waitGrants waits until n more leases were granted, failing after the
// resume bound.
func (f *fleet) waitGrants(n int, what string) {
	f.t.Helper()
	since := time.Now().UnixNano()
	deadline := time.Now().Add(resumeBound + 10*time.Second)
	waitUntil(f.t, resumeBound+10*time.Second, fmt.Sprintf("%s%d grants (%s)", f.name, n, what), func() error {
		got := f.tail.grantsAfter(since)
		if got >= n {
			return nil
		}
		if f.stalled != nil && time.Now().After(deadline) {
			f.t.Logf("%sno grant: the lock server holds %s", f.name, f.stalled())
		}
		return fmt.Errorf("%d grants so far", got)
	})
}

// A worker signalled the moment startWorker returns survives: it catches
// SIGUSR1 and SIGUSR2 before its "start" event. Before that, a SIGUSR2 sent
// to a worker still starting killed it by the signal's default action, and
// the run failed on its missing history.
func TestWorkerSignalledAtOnceSurvives(t *testing.T) {
	bin := buildWorker(t)
	dir := t.TempDir()
	// No server answers here: the worker's sections fail (and are
	// recorded), which is enough to see it alive.
	flags := []string{"-mode", "redis", "-sentinel", "127.0.0.1:1", "-master", "none",
		"-res-redis", "127.0.0.1:1", "-pg", "postgres://127.0.0.1:1/none", "-table", "t", "-ttl", "1s"}
	for i, sig := range []syscall.Signal{syscall.SIGUSR2, syscall.SIGUSR1, syscall.SIGUSR2} {
		w := startWorker(t, bin, dir, i, 0, flags)
		if err := w.signal(sig); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		time.Sleep(300 * time.Millisecond)
		if w.exited() {
			var ee *exec.ExitError
			if errors.As(w.err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					t.Fatalf("worker %d was killed by %v sent right after its start", i, ws.Signal())
				}
			}
		}
		w.kill()
	}
}
