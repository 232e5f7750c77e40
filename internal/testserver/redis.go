package testserver

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is one redis-server (or redis-sentinel) process on 127.0.0.1.
type Redis struct {
	name    string   // "redis-server" or "redis-sentinel", for messages
	bin     string   // executable
	lead    []string // arguments before everything else (sentinel: its config file)
	args    []string // defaults, then the caller's WithArgs
	dir     string
	logPath string
	port    int // fixed once StartRedis returns

	mu     sync.Mutex
	proc   *process
	paused bool
}

// RedisOption configures StartRedis, StartReplica and StartCluster.
type RedisOption func(*redisConfig)

type redisConfig struct {
	args []string
	bus  bool // cluster node: port+10000 must be free too
}

// WithArgs appends redis-server command-line arguments, e.g.
// WithArgs("--maxmemory", "10mb"). They come after the defaults, so they override them;
// --port, --bind, --dir, --daemonize and --logfile are the helper's and always win.
func WithArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// WithAppendOnly turns on the append-only file with appendfsync always, so that data
// written before Kill is there again after Restart.
func WithAppendOnly() RedisOption {
	return WithArgs("--appendonly", "yes", "--appendfsync", "always")
}

// StartRedis starts a redis-server on a free 127.0.0.1 port with its files in a
// t.TempDir(), persistence off (--save "" --appendonly no), repl-diskless-sync-delay 0 and
// DEBUG allowed from loopback, and returns once it answers PING. t.Cleanup stops it.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := requireRedisBin(t, "redis-server")
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir := t.TempDir()
	r := &Redis{
		name:    "redis-server",
		bin:     bin,
		args:    append(defaultRedisArgs(), cfg.args...),
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
	}
	r.start(t, cfg.bus, nil)
	return r
}

func defaultRedisArgs() []string {
	return []string{
		"--save", "",
		"--appendonly", "no",
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "local",
	}
}

// start picks a port, launches the server (prepare runs first with the port), and retries
// with a new port when the chosen one was taken meanwhile. It registers the cleanup.
func (r *Redis) start(t testing.TB, bus bool, prepare func(port int) error) {
	t.Helper()
	var err error
	for range 5 {
		r.port, err = freePort(bus)
		if err != nil {
			break
		}
		if prepare != nil {
			if err = prepare(r.port); err != nil {
				break
			}
		}
		var p *process
		p, err = r.launch()
		if err == nil {
			r.proc = p
			t.Cleanup(func() { r.cleanup(t) })
			return
		}
		if sf, ok := err.(*startFailure); !ok || !sf.portConflict {
			break
		}
	}
	t.Fatalf("testserver: start %s: %v", r.name, err)
}

// launch starts the process on r.port and waits until it is ready.
func (r *Redis) launch() (*process, error) {
	args := append(append([]string{}, r.lead...), r.args...)
	args = append(args,
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--daemonize", "no",
		"--logfile", "",
	)
	p, err := startProcess(procSpec{path: r.bin, args: args, dir: r.dir, logPath: r.logPath})
	if err != nil {
		return nil, err
	}
	if err := waitReady(r.name, r.logPath, p, func() error { return r.checkReady(p.pid) }); err != nil {
		return nil, err
	}
	return p, nil
}

// checkReady passes when the server on r.port is our process (not another test's server
// that took the port) and has finished loading its data.
func (r *Redis) checkReady(pid int) error {
	info, err := respString(r.Addr(), time.Second, "INFO")
	if err != nil {
		return err
	}
	if got, _ := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is answered by process %q, not ours (%d)", r.Addr(), got, pid)
	}
	if l, ok := infoField(info, "loading"); ok && l != "0" {
		return fmt.Errorf("still loading data")
	}
	pong, err := respString(r.Addr(), time.Second, "PING")
	if err != nil {
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING answered %q", pong)
	}
	return nil
}

func (r *Redis) cleanup(t testing.TB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return
	}
	graceful, err := r.proc.stop(syscall.SIGTERM, stopGrace)
	if err != nil {
		t.Errorf("testserver: stop %s %s (pid %d): %v", r.name, r.Addr(), r.proc.pid, err)
	} else if !graceful {
		t.Logf("testserver: %s %s (pid %d) ignored SIGTERM for %v and was killed", r.name, r.Addr(), r.proc.pid, stopGrace)
	}
	r.paused = false
}

// Addr is "127.0.0.1:PORT".
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Port is the TCP port; it stays the same across Restart.
func (r *Redis) Port() int { return r.port }

// Dir is the server's working directory (its data, config and log files).
func (r *Redis) Dir() string { return r.dir }

// LogPath is the file that receives the server's stdout and stderr (appended across restarts).
func (r *Redis) LogPath() string { return r.logPath }

// PID is the current process's id (it changes on Restart).
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc.pid
}

// Client returns a new go-redis client for this server, with its own connection pool
// (like another replica of a service would have), closed in t.Cleanup. Its options are
// the README's (Addr, ContextTimeoutEnabled; go-redis defaults otherwise, its command
// retries included); opts may change them, and a test that does says why.
func (r *Redis) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := testOptions(r.Addr())
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause freezes the server with SIGSTOP (its process group): connections stay open,
// commands time out. Cleanup resumes it before stopping it.
func (r *Redis) Pause(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc.exited() {
		t.Fatalf("testserver: Pause: %s %s is not running", r.name, r.Addr())
	}
	if err := r.proc.signalGroup(syscall.SIGSTOP); err != nil {
		t.Fatalf("testserver: Pause %s: %v", r.Addr(), err)
	}
	if err := r.proc.waitStopped(); err != nil {
		t.Fatalf("testserver: Pause %s: %v", r.Addr(), err)
	}
	r.paused = true
}

// Resume undoes Pause with SIGCONT.
func (r *Redis) Resume(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.proc.signalGroup(syscall.SIGCONT); err != nil {
		t.Fatalf("testserver: Resume %s: %v", r.Addr(), err)
	}
	r.paused = false
}

// Kill sends SIGKILL and waits until the process is gone. Without persistence
// (WithAppendOnly) its data is lost. Restart brings it back on the same port.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.proc.kill(); err != nil {
		t.Fatalf("testserver: Kill %s: %v", r.Addr(), err)
	}
	r.paused = false
}

// Stop shuts the server down gracefully (SIGTERM; SIGKILL if it has not exited within 5s)
// and waits until the process is gone.
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.proc.stop(syscall.SIGTERM, stopGrace); err != nil {
		t.Fatalf("testserver: Stop %s: %v", r.Addr(), err)
	}
	r.paused = false
}

// Restart starts the server again on the same port with the same arguments and waits
// until it is ready; a server still running is stopped gracefully first. If the port is
// briefly unavailable, binding is retried for up to 10s.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.proc.stop(syscall.SIGTERM, stopGrace); err != nil {
		t.Fatalf("testserver: Restart %s: stop: %v", r.Addr(), err)
	}
	r.paused = false
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := r.launch()
		if err == nil {
			r.proc = p
			return
		}
		if sf, ok := err.(*startFailure); ok && sf.portConflict && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Fatalf("testserver: Restart %s %s: %v", r.name, r.Addr(), err)
	}
}

// Info returns one INFO section ("" for the default set) parsed into fields.
func (r *Redis) Info(t testing.TB, section string) map[string]string {
	t.Helper()
	args := []string{"INFO"}
	if section != "" {
		args = append(args, section)
	}
	s, err := respString(r.Addr(), 2*time.Second, args...)
	if err != nil {
		t.Fatalf("testserver: INFO %s on %s: %v", section, r.Addr(), err)
	}
	return parseInfo(s)
}

func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}
