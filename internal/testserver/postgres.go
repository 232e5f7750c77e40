package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is one PostgreSQL server (postmaster) on 127.0.0.1, superuser "postgres" with
// trust authentication, fsync off.
type Postgres struct {
	bin     string // directory with initdb and postgres
	dir     string // t.TempDir(), owned by the server's user
	dataDir string
	sockDir string // "" when the temp dir path is too long for a unix socket
	logPath string
	cred    *syscall.Credential // non-nil when the test runs as root
	port    int

	mu   sync.Mutex
	proc *process
}

// StartPostgres runs initdb into a t.TempDir() and starts postgres listening on a free
// 127.0.0.1 port only (unix socket in the temp dir) with fsync=off, and returns once a
// pgx connection to it runs a query. Commits still reach the OS at once (synchronous_commit
// stays on), so committed data survives Kill. t.Cleanup stops it (fast shutdown, SIGINT;
// SIGKILL after 5s).
//
// PostgreSQL refuses to run as root: when euid is 0, initdb and postgres run as the
// "postgres" user (created by the Debian package), the temp dir is chowned to it and its
// parent made traversable.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	RequirePostgres(t)
	bin, _ := findPostgres()
	dir := t.TempDir()
	p := &Postgres{
		bin:     bin,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: dir,
		logPath: filepath.Join(dir, "postgres.log"),
	}
	if len(p.sockDir)+len("/.s.PGSQL.65535") > 100 { // sun_path limit is 107 bytes
		p.sockDir = ""
	}
	if os.Geteuid() == 0 {
		p.cred = postgresUser(t, dir)
	}
	p.initdb(t)

	var err error
	for range 5 {
		if p.port, err = freePort(false); err != nil {
			break
		}
		var proc *process
		if proc, err = p.launch(); err == nil {
			p.proc = proc
			t.Cleanup(func() { p.cleanup(t) })
			return p
		}
		if sf, ok := err.(*startFailure); !ok || !sf.portConflict {
			break
		}
	}
	t.Fatalf("testserver: start postgres: %v", err)
	return nil
}

// postgresUser returns the credentials of the "postgres" user and prepares dir for it.
func postgresUser(t testing.TB, dir string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("testserver: running as root, and PostgreSQL refuses to run as root, but there is no "+
			"\"postgres\" user to run it as (%v); install the server package, which creates it (%s), "+
			"or create the user (useradd --system postgres), or run the tests as a non-root user", err, postgresInstall)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// t.TempDir() is <root>/NNN where <root> was made 0700 by the testing package: let
	// the postgres user through <root>, and give it NNN.
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	for d := filepath.Dir(filepath.Dir(dir)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatalf("testserver: %v", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("testserver: the postgres user cannot reach %s: %s is not world-traversable (mode %v); "+
				"point TMPDIR at a directory such as /tmp", dir, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

func (p *Postgres) env() []string {
	return []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + p.dir,
		"LANG=C", "LC_ALL=C", "LC_MESSAGES=C",
		"TZ=UTC",
	}
}

func (p *Postgres) initdb(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "initdb"),
		"-D", p.dataDir, "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = p.dir
	cmd.Env = p.env()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := cmd.Run(); err != nil {
		t.Fatalf("testserver: initdb: %v\n--- %s (tail) ---\n%s", err, p.logPath, logTail(p.logPath, 0))
	}
}

func (p *Postgres) launch() (*process, error) {
	proc, err := startProcess(procSpec{
		path: filepath.Join(p.bin, "postgres"),
		args: []string{
			"-D", p.dataDir,
			"-p", strconv.Itoa(p.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + p.sockDir,
			"-c", "fsync=off",
			"-c", "logging_collector=off",
			"-c", "huge_pages=off",
			"-c", "dynamic_shared_memory_type=mmap",
		},
		dir:     p.dir,
		logPath: p.logPath,
		env:     p.env(),
		cred:    p.cred,
	})
	if err != nil {
		return nil, err
	}
	if err := waitReady("postgres", p.logPath, proc, p.checkReady); err != nil {
		return nil, err
	}
	return proc, nil
}

// checkReady passes once a connection on our port reaches our server (its data directory
// is ours, not another test's server that took the port) and runs a query.
func (p *Postgres) checkReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN()+"&connect_timeout=1")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var dd string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dd); err != nil {
		return err
	}
	if dd != p.dataDir {
		return fmt.Errorf("%s is answered by another server (data directory %s)", p.Addr(), dd)
	}
	return nil
}

func (p *Postgres) cleanup(t testing.TB) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalBackends(syscall.SIGCONT)
	graceful, err := p.proc.stop(syscall.SIGINT, stopGrace)
	if err != nil {
		t.Errorf("testserver: stop postgres %s (pid %d): %v", p.Addr(), p.proc.pid, err)
	} else if !graceful {
		t.Logf("testserver: postgres %s (pid %d) did not shut down within %v and was killed", p.Addr(), p.proc.pid, stopGrace)
	}
}

// PgxPool opens a pool on dsn of at most maxConns connections, closed with
// the test.
func PgxPool(t testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DSN is "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable".
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.Addr())
}

// Addr is "127.0.0.1:PORT".
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Port is the TCP port; it stays the same across Restart.
func (p *Postgres) Port() int { return p.port }

// Dir is the server's temp dir (data directory "data", the log, the unix socket).
func (p *Postgres) Dir() string { return p.dir }

// LogPath is the file that receives initdb's and the server's output.
func (p *Postgres) LogPath() string { return p.logPath }

// PID is the postmaster's process id (it changes on Restart).
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc.pid
}

// Pause freezes the postmaster and all of its children with SIGSTOP: the
// auxiliary processes in its process group and the session backends, which
// call setsid() and so leave that group. A paused server answers nothing, on
// existing sessions either. Resume undoes it. Cleanup resumes it before
// stopping it.
func (p *Postgres) Pause(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc.exited() {
		t.Fatalf("testserver: Pause: postgres %s is not running", p.Addr())
	}
	// The postmaster first, so that it forks no backend the scan misses.
	if err := p.proc.signalGroup(syscall.SIGSTOP); err != nil {
		t.Fatalf("testserver: Pause postgres: %v", err)
	}
	p.signalBackends(syscall.SIGSTOP)
	// SIGSTOP takes effect as each process is next scheduled: on a loaded
	// machine the state read right after it was still "S" for every one
	// (TestPostgresPauseStopsSessions under a CPU hog). Pause returns once
	// they are all stopped.
	for _, pid := range append(childPIDs(p.proc.pid), p.proc.pid) {
		if err := waitStopped(pid); err != nil {
			t.Fatalf("testserver: Pause postgres %s: %v", p.Addr(), err)
		}
	}
}

// PauseBackend stops one session backend of this server, pid (a child of
// the postmaster: pg_locks.pid, pg_backend_pid()), with SIGSTOP, and returns
// once it is stopped. The session keeps its connection and its locks and
// answers nothing until resume, which sends SIGCONT (once; cleanup does it
// too). A pid that is not this server's backend fails the test.
func (p *Postgres) PauseBackend(t testing.TB, pid int) (resume func()) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ppid, ok := procStat(pid); !ok || ppid != p.proc.pid || p.proc.exited() {
		t.Fatalf("testserver: PauseBackend: pid %d is not a backend of postgres %s", pid, p.Addr())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("testserver: PauseBackend %d: %v", pid, err)
	}
	if err := waitStopped(pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		t.Fatalf("testserver: PauseBackend: %v", err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			// Only while it is still the postmaster's child: a reaped
			// pid may have been reused.
			if _, ppid, ok := procStat(pid); ok && ppid == p.proc.pid && !p.proc.exited() {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// signalBackends sends sig to every child of the postmaster (found in /proc
// by parent pid), the session backends among them. It is a no-op once the
// postmaster has been reaped, so a pid cannot have been reused.
func (p *Postgres) signalBackends(sig syscall.Signal) {
	if p.proc.exited() {
		return
	}
	for _, pid := range childPIDs(p.proc.pid) {
		_ = syscall.Kill(pid, sig)
	}
}

// childPIDs lists the processes whose parent is ppid.
func childPIDs(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pp, ok := procStat(pid); ok && pp == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat is pid's state letter and parent pid, from /proc/PID/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	return parseStat(b)
}

// parseStat reads "pid (comm) state ppid ...": comm may hold spaces and
// parentheses.
func parseStat(b []byte) (state string, ppid int, ok bool) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	pp, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, false
	}
	return f[0], pp, true
}

// Resume undoes Pause with SIGCONT.
func (p *Postgres) Resume(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalBackends(syscall.SIGCONT)
	if err := p.proc.signalGroup(syscall.SIGCONT); err != nil {
		t.Fatalf("testserver: Resume postgres: %v", err)
	}
	// Resume returns once no process of the server is stopped: a stopped
	// postmaster (or a backend holding a lock the others wait for) accepts
	// TCP connections and answers nothing, which the caller would see only
	// as timeouts.
	deadline := time.Now().Add(resumeWait)
	for {
		stopped := p.stoppedPIDs()
		if len(stopped) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: Resume postgres %s: processes %v still stopped %v after SIGCONT", p.Addr(), stopped, resumeWait)
		}
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		time.Sleep(pollInterval)
	}
}

// resumeWait bounds how long Resume waits for the server's processes to run.
const resumeWait = 10 * time.Second

// stoppedPIDs lists the postmaster and its children that are in the stopped
// state ("T" in /proc/PID/stat).
func (p *Postgres) stoppedPIDs() []int {
	if p.proc.exited() {
		return nil
	}
	var out []int
	for _, pid := range append(childPIDs(p.proc.pid), p.proc.pid) {
		if st, _, ok := procStat(pid); ok && st == "T" {
			out = append(out, pid)
		}
	}
	return out
}

// Kill sends SIGKILL to the postmaster and all of its children (session
// backends included) and waits until it is gone. Committed data survives (it
// is in the OS page cache); Restart runs crash recovery.
func (p *Postgres) Kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.proc.signalGroup(syscall.SIGSTOP) // no new children while they are killed
	p.signalBackends(syscall.SIGKILL)
	if err := p.proc.kill(); err != nil {
		t.Fatalf("testserver: Kill postgres: %v", err)
	}
}

// Stop shuts the server down (fast shutdown: SIGINT; SIGKILL after 5s) and waits until
// the postmaster is gone.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalBackends(syscall.SIGCONT)
	if _, err := p.proc.stop(syscall.SIGINT, stopGrace); err != nil {
		t.Fatalf("testserver: Stop postgres: %v", err)
	}
}

// Restart starts the server again on the same port and data directory (stopping it first
// if it is running) and waits until it accepts queries, retrying the bind for up to 10s.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalBackends(syscall.SIGCONT)
	if _, err := p.proc.stop(syscall.SIGINT, stopGrace); err != nil {
		t.Fatalf("testserver: Restart postgres: stop: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		proc, err := p.launch()
		if err == nil {
			p.proc = proc
			return
		}
		if sf, ok := err.(*startFailure); ok && sf.portConflict && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Fatalf("testserver: Restart postgres %s: %v", p.Addr(), err)
	}
}

// HoldRow locks the one row query selects FOR UPDATE (args its parameters)
// in a transaction of pool's, as an application's transaction would, until
// the returned release rolls it back (or the test ends).
func HoldRow(t testing.TB, pool *pgxpool.Pool, query string, args ...any) (release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if tag, err := tx.Exec(ctx, query, args...); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("lock the row (%s): %v, %d rows", query, err, tag.RowsAffected())
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
