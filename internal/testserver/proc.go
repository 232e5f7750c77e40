package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// readyTimeout is how long a server may take to become ready. 10 s was
	// too short at a load average of ~45 (a postmaster after kill -9, a
	// Cluster node, with nothing in their logs yet): the fault harness's
	// soaks failed on it. It bounds a failure only; a ready server is seen
	// within pollInterval.
	readyTimeout = 30 * time.Second
	stopGrace    = 5 * time.Second // graceful signal -> SIGKILL
	killWait     = 5 * time.Second // SIGKILL -> reaped
	pollInterval = 20 * time.Millisecond
	maxPort      = 55535 // a cluster node's bus port is port+10000
)

// procSpec describes how to run one server process.
type procSpec struct {
	path    string
	args    []string
	dir     string // working directory
	logPath string // stdout and stderr are appended here
	env     []string
	cred    *syscall.Credential // run as another user (postgres under root)
}

// process is one running (or exited) child. done is closed once it has been reaped.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error // cmd.Wait's result; read only after done is closed
	// logOffset is the size of the log file before this process started, so that
	// failure messages show only this run's output.
	logOffset int64
	logPath   string
}

func startProcess(spec procSpec) (*process, error) {
	f, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	var off int64
	if fi, err := f.Stat(); err == nil {
		off = fi.Size()
	}
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Stdout = f // an *os.File is handed to the child directly: no copying goroutine
	cmd.Stderr = f
	cmd.Env = spec.env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: Kill/Pause reach forked children (redis BGSAVE, postgres
		// backends) too, and a terminal's Ctrl-C goes to the test binary only, whose
		// death then kills the server through Pdeathsig.
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.path, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), logOffset: off, logPath: spec.logPath}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) wait(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-p.done:
		return true
	case <-tm.C:
		return false
	}
}

// signalGroup signals the process group whose id is the child's PID (it was started with
// Setpgid), but only while the child has not been reaped, so the id cannot be reused.
func (p *process) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// waitStopped waits (up to 5s) until every thread of the process shows as
// stopped in /proc: SIGSTOP takes effect only as each thread is next
// scheduled, and on a loaded machine a thread of a JVM member answered a
// request sent right after the signal (TestZooKeeperThreeFaults under a CPU
// hog: "paused member answered").
func (p *process) waitStopped() error { return waitStopped(p.pid) }

// waitStopped is process.waitStopped for any pid the caller knows is not
// reaped (a child of a process it has not reaped).
func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	dir := fmt.Sprintf("/proc/%d/task", pid)
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return nil // gone, or no /proc: nothing to wait for
		}
		running := 0
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue // the thread ended
			}
			// The state follows the ")" that ends the command name.
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
				if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
					running++
				}
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads still running 5s after SIGSTOP", pid, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// stop sends SIGCONT (a paused server could not act on anything else), then sig, and
// escalates to SIGKILL after grace. It reports whether the graceful stop worked.
func (p *process) stop(sig syscall.Signal, grace time.Duration) (graceful bool, err error) {
	if p.exited() {
		return true, nil
	}
	_ = p.signalGroup(syscall.SIGCONT)
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false, fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err)
	}
	if p.wait(grace) {
		return true, nil
	}
	return false, p.kill()
}

// kill sends SIGKILL to the child and its process group and waits until it is reaped.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	_ = p.signalGroup(syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if !p.wait(killWait) {
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.pid, killWait)
	}
	// Its children (postgres backends, a redis fork) were killed too, but may still be
	// exiting, holding shared memory or sockets: wait until none is left running.
	deadline := time.Now().Add(killWait)
	for groupAlive(p.pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still has live members %v after SIGKILL", p.pid, killWait)
		}
		time.Sleep(pollInterval)
	}
	return nil
}

// groupAlive reports whether a process in process group pgid is still running (zombies,
// which hold nothing, do not count), from /proc.
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			return true
		}
	}
	return false
}

// logTail returns the last lines this process wrote to its log.
func (p *process) logTail() string { return logTail(p.logPath, p.logOffset) }

func logTail(path string, from int64) string {
	const maxBytes = 4096
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	start := max(from, fi.Size()-maxBytes)
	b, _ := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return "(log is empty)"
	}
	return s
}

// startFailure is why a server did not become ready.
type startFailure struct {
	msg          string
	portConflict bool // the port was taken by someone else: retry
}

func (e *startFailure) Error() string { return e.msg }

// waitReady polls check until it succeeds, the process exits or readyTimeout passes.
func waitReady(name, logPath string, p *process, check func() error) error {
	return waitReadyWithin(name, logPath, p, readyTimeout, check)
}

// waitReadyWithin is waitReady with its own limit (a JVM, or a consensus cluster whose
// members must first find each other, takes longer than readyTimeout on a loaded machine).
func waitReadyWithin(name, logPath string, p *process, limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		if p.exited() {
			tail := p.logTail()
			return &startFailure{
				msg: fmt.Sprintf("%s (pid %d) exited before it was ready: %v\n--- %s (tail) ---\n%s",
					name, p.pid, p.err, logPath, tail),
				// The port is taken, or (postgres, right after Kill) the old server's shared
				// memory is still attached: both clear up, so the start is retried.
				portConflict: strings.Contains(tail, "Address already in use") ||
					strings.Contains(tail, "address already in use") ||
					strings.Contains(tail, "pre-existing shared memory block"),
			}
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = p.kill()
			return &startFailure{msg: fmt.Sprintf("%s (pid %d) not ready after %v: %v\n--- %s (tail) ---\n%s",
				name, p.pid, limit, err, logPath, p.logTail())}
		}
		p.wait(pollInterval)
	}
}

// freePort returns a port that was free on 127.0.0.1 a moment ago, drawn from below
// the kernel's ephemeral range: a port from that range can be taken by any outgoing
// connection while its server is down, so a server restarted on its port (a killed
// ZooKeeper member, a restarted Redis) would fail with "Address already in use" (seen:
// a zk member in the fault harness, with other packages' clients dialling meanwhile).
// With bus set, port+10000 (a cluster node's bus port) was free too, and also lies
// below that range: a cluster node's bus port has no retry of its own.
func freePort(bus bool) (int, error) {
	lo, hi := busPortRange()
	return freePortFrom(func() int { return lo + rand.IntN(hi-lo) }, 200, bus)
}

// busPortRange is where cluster nodes' client ports are drawn from: [lo, hi), so that
// the bus ports [lo+10000, hi+10000) end below the ephemeral range's first port.
func busPortRange() (lo, hi int) {
	first := 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				first = n
			}
		}
	}
	hi = min(first-10000, maxPort+1)
	return max(1024, hi-8000), hi
}

// freePortFrom tries up to n candidates and returns the first whose port (and, with
// bus, port+10000) can be bound on 127.0.0.1 and is reserved by no other server of
// this or another test process (reserve).
func freePortFrom(candidate func() int, n int, bus bool) (int, error) {
	var lastErr error
	for range n {
		port := candidate()
		if err := reserve(port); err != nil {
			lastErr = err
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			lastErr = err
			continue
		}
		if !bus {
			l.Close()
			return port, nil
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		l2.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port found below the ephemeral range (with its bus port: %v): %v", bus, lastErr)
}

// reserved keeps open, for the life of the test process, the lock file of every
// port reserve handed out.
var reserved = struct {
	sync.Mutex
	files []*os.File
}{}

// reserve takes port for this test process, for good: an exclusive flock on a file
// named after it in a directory every test process shares. Test binaries run in
// parallel draw from one range, and a server that is down (killed, stopped, before
// a restart on its port) frees its port for another binary's server, whose faults
// this binary's clients would then meet: a rehearsal's breaker test saw its
// restarted Redis answer, then refuse, then answer again (another test's server on
// its port, paused, stopped). Bind-ability alone cannot see a port whose server is
// down; the flock can, and it ends with the process that held it, however it ends.
// A port is never handed out twice, in this process either (a second flock of the
// same file fails on a new open file description).
func reserve(port int) error {
	dir := filepath.Join(os.TempDir(), "lockkit-testserver-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("port reservations: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return fmt.Errorf("port reservations: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("port %d is reserved by a test server: %w", port, err)
	}
	reserved.Lock()
	reserved.files = append(reserved.files, f)
	reserved.Unlock()
	return nil
}

// respDo sends one command over a fresh connection using RESP2 and returns the reply:
// string, int64, nil, []any, or a respError. It is for readiness checks, where a pooled
// client's dial back-off would only slow things down.
func respDo(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var sb strings.Builder
	fmt.Fprintf(&sb, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, sb.String()); err != nil {
		return nil, err
	}
	return readRESP(bufio.NewReader(c))
}

type respError string

func (e respError) Error() string { return string(e) }

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("resp: empty line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return respError(line[1:]), nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unexpected reply %q", line)
}

// respString runs a command whose reply is a string and turns a server error into an error.
func respString(addr string, timeout time.Duration, args ...string) (string, error) {
	v, err := respDo(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case respError:
		return "", v
	case string:
		return v, nil
	}
	return "", fmt.Errorf("%s: unexpected reply %#v", args[0], v)
}

// infoField returns field's value from an INFO or CLUSTER INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// pidGone reports whether no process with this PID exists any more.
func pidGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
