package testserver

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	zookeeperInstall = "apt-get install -y zookeeper"
	zookeeperJar     = "/usr/share/java/zookeeper.jar" // its manifest's Class-Path names the rest
	zkReadyTimeout   = 60 * time.Second                // a JVM on a loaded 2-core machine
)

// ZooKeeperJarEnv names an environment variable that, when set, is the zookeeper jar.
const ZooKeeperJarEnv = "LOCKKIT_ZOOKEEPER_JAR"

func zookeeperBins() (java, jar string, err error) {
	jar = os.Getenv(ZooKeeperJarEnv)
	if jar == "" {
		jar = zookeeperJar
	}
	java, jerr := lookBin("java")
	if _, serr := os.Stat(jar); serr != nil || jerr != nil {
		return "", "", fmt.Errorf("ZooKeeper (%s and java) not found; install with: %s", jar, zookeeperInstall)
	}
	return java, jar, nil
}

// RequireZooKeeper makes sure Debian's zookeeper package (and java) is installed, like
// RequireRedis.
func RequireZooKeeper(t testing.TB) {
	t.Helper()
	if _, _, err := zookeeperBins(); err != nil {
		missing(t, err)
	}
}

// ZooKeeper is an ensemble of 1 (standalone) or 3 (any n) ZooKeeper servers on 127.0.0.1.
type ZooKeeper struct {
	Members []*ZKMember
	// TickTime is the ensemble's tick; the server grants session timeouts between
	// MinSessionTimeout and MaxSessionTimeout.
	TickTime, MinSessionTimeout, MaxSessionTimeout time.Duration
	// SyncLimit is zoo.cfg's syncLimit, in ticks: a follower that hears nothing from its
	// leader for SyncLimit × TickTime gives it up (and until then serves its clients).
	SyncLimit int

	quorumProxies bool
	proxies       map[[2]int]*QuorumProxy // [from, to] member indexes
}

// ZKMember is one ZooKeeper server process.
type ZKMember struct {
	member
	ID                                   int // myid, 1-based
	ClientPort, QuorumPort, ElectionPort int
	DataDir                              string
}

// ZKOption configures StartZooKeeper.
type ZKOption func(*ZooKeeper)

// WithZKTiming sets tickTime and the session timeout bounds the server grants (defaults
// 100ms, 200ms and 20s).
func WithZKTiming(tick, minSession, maxSession time.Duration) ZKOption {
	return func(z *ZooKeeper) {
		z.TickTime, z.MinSessionTimeout, z.MaxSessionTimeout = tick, minSession, maxSession
	}
}

// StartZooKeeper starts an n-member ensemble (n = 1 runs standalone) with org.apache.
// zookeeper.server.quorum.QuorumPeerMain and a zoo.cfg of its own: free 127.0.0.1 ports,
// dataDir in t.TempDir(), forceSync off, admin server off, 4lw commands srvr,stat,ruok,mntr allowed. It
// returns once every member serves (srvr reports a mode). t.Cleanup stops them by PID.
func StartZooKeeper(t testing.TB, n int, opts ...ZKOption) *ZooKeeper {
	t.Helper()
	java, jar, err := zookeeperBins()
	if err != nil {
		missing(t, err)
	}
	if n < 1 {
		t.Fatalf("testserver: StartZooKeeper: n = %d, want at least 1", n)
	}
	var lastErr error
	for range 3 { // fresh ports when one was taken between the check and the bind
		z := &ZooKeeper{TickTime: 100 * time.Millisecond, MinSessionTimeout: 200 * time.Millisecond, MaxSessionTimeout: 20 * time.Second, SyncLimit: 20}
		for _, o := range opts {
			o(z)
		}
		if err := z.prepare(t, java, jar, n); err != nil {
			t.Fatalf("testserver: StartZooKeeper: %v", err)
		}
		for _, m := range z.Members {
			t.Cleanup(func() { m.cleanup(t) })
		}
		if lastErr = startAll(z.members()); lastErr == nil {
			return z
		}
		for _, m := range z.Members {
			m.cleanup(t)
		}
		if sf, ok := unwrapStartFailure(lastErr); !ok || !sf.portConflict {
			break
		}
	}
	t.Fatalf("testserver: StartZooKeeper(%d): %v", n, lastErr)
	return nil
}

func (z *ZooKeeper) prepare(t testing.TB, java, jar string, n int) error {
	var servers []string
	for i := range n {
		m := &ZKMember{ID: i + 1}
		for _, p := range []*int{&m.ClientPort, &m.QuorumPort, &m.ElectionPort} {
			port, err := freePort(false)
			if err != nil {
				return err
			}
			*p = port
		}
		m.DataDir = filepath.Join(t.TempDir(), "data")
		if err := os.MkdirAll(m.DataDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(m.DataDir, "myid"), []byte(strconv.Itoa(m.ID)+"\n"), 0o644); err != nil {
			return err
		}
		servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", m.ID, m.QuorumPort, m.ElectionPort))
		z.Members = append(z.Members, m)
	}
	if z.quorumProxies && n > 1 {
		z.proxies = map[[2]int]*QuorumProxy{}
		for x := range z.Members {
			for y, to := range z.Members {
				if x == y {
					continue
				}
				p, err := startQuorumProxy(t, x, y, net.JoinHostPort("127.0.0.1", strconv.Itoa(to.QuorumPort)))
				if err != nil {
					return err
				}
				z.proxies[[2]int{x, y}] = p
			}
		}
	}
	for x, m := range z.Members {
		dir := filepath.Dir(m.DataDir)
		cfg := []string{
			"tickTime=" + strconv.FormatInt(z.TickTime.Milliseconds(), 10),
			"initLimit=50", // ticks; generous for JVM start on a loaded machine
			"syncLimit=" + strconv.Itoa(z.SyncLimit),
			"dataDir=" + m.DataDir,
			"clientPort=" + strconv.Itoa(m.ClientPort),
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"4lw.commands.whitelist=srvr,stat,ruok,mntr",
			"minSessionTimeout=" + strconv.FormatInt(z.MinSessionTimeout.Milliseconds(), 10),
			"maxSessionTimeout=" + strconv.FormatInt(z.MaxSessionTimeout.Milliseconds(), 10),
			"autopurge.purgeInterval=0",
			// No fsync of the transaction log, as PostgreSQL runs with
			// fsync=off here: every write waits for that fsync, and on
			// this ext4 disk an fsync beside a compile took up to 757ms
			// (p99 191ms), past the 500ms command timeout (a CPU-hog
			// rehearsal of round 23 failed TestSingle so). A killed
			// server keeps what it wrote: the page cache outlives it.
			"forceSync=no",
		}
		if n > 1 {
			for y, line := range servers {
				if p := z.QuorumLink(x, y); p != nil {
					to := z.Members[y]
					line = fmt.Sprintf("server.%d=127.0.0.1:%d:%d", to.ID, p.Port(), to.ElectionPort)
				}
				cfg = append(cfg, line)
			}
		}
		cfgPath := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		args := []string{
			"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-cp", jar + ":/usr/share/java/slf4j-simple.jar",
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
		}
		m.member = member{
			name:    fmt.Sprintf("zookeeper %d %s", m.ID, m.Addr()),
			logPath: filepath.Join(dir, "zookeeper.log"),
			spawn: func() (*process, error) {
				return startProcess(procSpec{path: java, args: args, dir: dir, logPath: filepath.Join(dir, "zookeeper.log")})
			},
		}
		m.ready = func(p *process) error {
			return waitReadyWithin(m.name, m.logPath, p, zkReadyTimeout, func() error {
				_, err := m.Mode()
				return err
			})
		}
	}
	return nil
}

func (z *ZooKeeper) members() []*member {
	out := make([]*member, len(z.Members))
	for i, m := range z.Members {
		out[i] = &m.member
	}
	return out
}

// Addr is "127.0.0.1:CLIENTPORT".
func (m *ZKMember) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.ClientPort)) }

// Servers lists every member's client address, as zk.Connect takes them.
func (z *ZooKeeper) Servers() []string {
	out := make([]string, len(z.Members))
	for i, m := range z.Members {
		out[i] = m.Addr()
	}
	return out
}

// ServersString is Servers joined by commas (as ZOOKEEPER_SERVERS takes them).
func (z *ZooKeeper) ServersString() string { return strings.Join(z.Servers(), ",") }

// FourLetter sends a four-letter-word command (srvr, stat, ruok, mntr) and returns the reply.
func (m *ZKMember) FourLetter(cmd string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", m.Addr(), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Mode is the member's "Mode:" from srvr: leader, follower or standalone. It is an error
// while the member does not serve (no quorum, still electing).
func (m *ZKMember) Mode() (string, error) {
	s, err := m.FourLetter("srvr", time.Second)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("srvr: %q", strings.TrimSpace(s))
}

// Leader returns the index of the member whose mode is leader or standalone, asking the
// serving members until one says so, for up to timeout; it fails the test otherwise.
func (z *ZooKeeper) Leader(t testing.TB, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for i, m := range z.Members {
			if !m.serving() {
				continue
			}
			if mode, err := m.Mode(); err == nil && (mode == "leader" || mode == "standalone") {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: zookeeper: no leader within %v", timeout)
			return -1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RestartAll stops every member, starts them all again with the same data and waits
// until each serves.
func (z *ZooKeeper) RestartAll(t testing.TB) {
	t.Helper()
	for _, m := range z.Members {
		m.Stop(t)
	}
	if err := startAll(z.members()); err != nil {
		t.Fatalf("testserver: zookeeper RestartAll: %v", err)
	}
}
