package circuit

import (
	"sync"
	"sync/atomic"
	"time"
)

// A timeout is a backend failure only if this process was running while it
// waited. A process under a CPU limit (a container's CFS quota) or with every
// thread busy may not be scheduled for hundreds of milliseconds: the reply
// sits in the socket buffer while the command's deadline passes, and counting
// that timeout would let the client open its own breaker against a healthy
// server (issue 35: at a 20% quota, 1–3 openings per 12 s, each refusing every
// lock for 2 s).
//
// lagMonitor measures how late a runnable goroutine gets to run: while any
// acquisition is in flight, one goroutine ticks every lagTick and records how
// much later than due each tick came. A timeout during which some tick came
// at least an eighth of the wait (and lagFloor) late is the process's own starvation
// (starved), which the breaker ignores. The monitor stops after a second
// with nothing in flight, so an idle client runs no goroutine of it.
type lagMonitor struct {
	inflight atomic.Int64
	lastTick atomic.Int64 // unix nanoseconds of the last tick; 0 while the monitor is stopped (written under mu)

	mu   sync.Mutex
	ring [lagRing]lagTickRec
	next int
}

type lagTickRec struct {
	at  int64 // unix nanoseconds
	lag time.Duration
}

const (
	lagTick = 10 * time.Millisecond
	lagRing = 512 // ticks kept: about 5 s at lagTick, longer than any command waits
	lagIdle = 100 // ticks with nothing in flight before the monitor stops
)

var monitor lagMonitor

// enter marks an acquisition in flight, starting the monitor if needed.
func (m *lagMonitor) enter() {
	m.inflight.Add(1)
	if m.lastTick.Load() != 0 {
		return
	}
	m.mu.Lock()
	if m.lastTick.Load() == 0 {
		m.lastTick.Store(time.Now().UnixNano())
		go m.loop()
	}
	m.mu.Unlock()
}

func (m *lagMonitor) leave() { m.inflight.Add(-1) }

func (m *lagMonitor) loop() {
	t := time.NewTicker(lagTick)
	defer t.Stop()
	prev := time.Now()
	idle := 0
	for now := range t.C {
		now = time.Now() // the ticker's value is when it was due, not when this ran
		lag := now.Sub(prev) - lagTick
		prev = now
		m.mu.Lock()
		m.ring[m.next] = lagTickRec{at: now.UnixNano(), lag: max(0, lag)}
		m.next = (m.next + 1) % lagRing
		m.lastTick.Store(now.UnixNano())
		if m.inflight.Load() > 0 {
			idle = 0
		} else if idle++; idle >= lagIdle {
			m.lastTick.Store(0)
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// maxLag is the longest a tick came late since since, counting the tick
// that is late right now (the monitor not having run since its last tick).
func (m *lagMonitor) maxLag(since time.Time) time.Duration {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var worst time.Duration
	s := since.UnixNano()
	for _, r := range m.ring {
		if r.at >= s && r.lag > worst {
			worst = r.lag
		}
	}
	if last := m.lastTick.Load(); last != 0 {
		worst = max(worst, now.Sub(time.Unix(0, last))-lagTick)
	}
	return worst
}

// starved reports whether the process was kept from running for at least an
// eighth of the wait that began at start (and at least lagFloor, far above
// a ticker's jitter): long enough that a timeout says more about this
// process than about the server.
func starved(start time.Time) bool {
	wait := time.Since(start)
	return monitor.maxLag(start) >= max(wait/8, lagFloor)
}

const lagFloor = 50 * time.Millisecond

// starvedTimeouts counts the timeouts the breakers ignored as this
// process's own starvation (closed circuits only), process-wide: a test
// that counts the failures that trip a breaker allows one more for each.
var starvedTimeouts atomic.Int64

// StarvedTimeouts is how many timeouts the breakers have ignored as
// starvation since the process started.
func StarvedTimeouts() int64 { return starvedTimeouts.Load() }
