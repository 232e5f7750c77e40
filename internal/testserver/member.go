package testserver

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// member is one server process of a consensus cluster (etcd or ZooKeeper): it can be
// stopped, killed, paused and restarted on the same ports with the same data directory.
type member struct {
	name    string // e.g. "etcd m1 127.0.0.1:PORT", for messages
	logPath string
	spawn   func() (*process, error) // starts the process without waiting
	ready   func(p *process) error   // waits until the process serves (within its own limit)

	mu     sync.Mutex
	proc   *process
	paused bool
}

// PID is the current process's id (it changes on Restart).
func (m *member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc.pid
}

// Running reports whether the process is running (a paused one counts).
func (m *member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited()
}

// serving reports whether the process runs and is not paused.
func (m *member) serving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited() && !m.paused
}

// LogPath is the file that receives the member's stdout and stderr (appended across restarts).
func (m *member) LogPath() string { return m.logPath }

// Pause freezes the member with SIGSTOP: its connections stay open and nothing is
// answered. Resume, Stop, Restart and cleanup send SIGCONT first.
func (m *member) Pause(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc.exited() {
		t.Fatalf("testserver: Pause: %s is not running", m.name)
	}
	if err := m.proc.signalGroup(syscall.SIGSTOP); err != nil {
		t.Fatalf("testserver: Pause %s: %v", m.name, err)
	}
	if err := m.proc.waitStopped(); err != nil {
		t.Fatalf("testserver: Pause %s: %v", m.name, err)
	}
	m.paused = true
}

// Resume undoes Pause with SIGCONT.
func (m *member) Resume(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.proc.signalGroup(syscall.SIGCONT); err != nil {
		t.Fatalf("testserver: Resume %s: %v", m.name, err)
	}
	m.paused = false
}

// Kill sends SIGKILL and waits until the process is gone. Its data directory stays.
func (m *member) Kill(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.proc.kill(); err != nil {
		t.Fatalf("testserver: Kill %s: %v", m.name, err)
	}
	m.paused = false
}

// Stop shuts the member down gracefully (SIGTERM; SIGKILL after 5s) and waits until
// the process is gone.
func (m *member) Stop(t testing.TB) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.proc.stop(syscall.SIGTERM, stopGrace); err != nil {
		t.Fatalf("testserver: Stop %s: %v", m.name, err)
	}
	m.paused = false
}

// Restart stops the member if it runs, starts it again on the same ports with the same
// data directory and waits until it serves (which needs a quorum of its cluster up).
func (m *member) Restart(t testing.TB) {
	t.Helper()
	m.Stop(t)
	m.Start(t)
}

// Start starts a stopped or killed member again and waits until it serves.
func (m *member) Start(t testing.TB) {
	t.Helper()
	if err := m.startNoWait(); err != nil {
		t.Fatalf("testserver: start %s: %v", m.name, err)
	}
	if err := m.waitServing(); err != nil {
		t.Fatalf("testserver: start %s: %v", m.name, err)
	}
}

// startNoWait launches the process (a running one is left alone); binding a port that
// is briefly still held is retried for up to 10s by waitServing's caller restarting.
func (m *member) startNoWait() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return nil
	}
	p, err := m.spawn()
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// waitServing waits until the member serves; if it exited because its port was still
// held, it is started again for up to 10s.
func (m *member) waitServing() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		p := m.proc
		m.mu.Unlock()
		err := m.ready(p)
		if err == nil {
			return nil
		}
		if sf, ok := err.(*startFailure); ok && sf.portConflict && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			if err := m.startNoWait(); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

func (m *member) cleanup(t testing.TB) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return
	}
	graceful, err := m.proc.stop(syscall.SIGTERM, stopGrace)
	if err != nil {
		t.Errorf("testserver: stop %s (pid %d): %v", m.name, m.proc.pid, err)
	} else if !graceful {
		t.Logf("testserver: %s (pid %d) ignored SIGTERM for %v and was killed", m.name, m.proc.pid, stopGrace)
	}
	m.paused = false
}

// startAll launches every member, then waits for each: the members of a cluster can
// only become ready together.
func startAll(ms []*member) error {
	for _, m := range ms {
		if err := m.startNoWait(); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if err := m.waitServing(); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}
