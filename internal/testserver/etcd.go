package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const etcdBuild = "bash .ci/build-etcd.sh"

// etcdReadyTimeout bounds how long a member takes to join its cluster and see a leader.
const etcdReadyTimeout = 30 * time.Second

// ToolsBinDir is where .ci/build-etcd.sh (and build-jaeger.sh) put their binaries:
// $LOCKKIT_TOOLS_BIN, else ${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin.
func ToolsBinDir() string {
	if d := os.Getenv("LOCKKIT_TOOLS_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "lockkit", "bin")
}

// EtcdBinEnv names an environment variable that, when set, is the etcd binary to run;
// otherwise ToolsBinDir()/etcd, then etcd on $PATH.
const EtcdBinEnv = "LOCKKIT_ETCD_BIN"

func etcdBin() (string, error) {
	cands := []string{os.Getenv(EtcdBinEnv), filepath.Join(ToolsBinDir(), "etcd")}
	if p, err := exec.LookPath("etcd"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c != "" && isExecutable(c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("etcd not found (looked at $%s, %s and $PATH); build it with: %s",
		EtcdBinEnv, filepath.Join(ToolsBinDir(), "etcd"), etcdBuild)
}

// RequireEtcd makes sure an etcd binary is there, like RequireRedis (skips with the build
// command outside CI, fails under CI=true).
func RequireEtcd(t testing.TB) string {
	t.Helper()
	p, err := etcdBin()
	if err != nil {
		missing(t, err)
	}
	return p
}

// EtcdCluster is an etcd cluster of 1 or 3 (any n) members on 127.0.0.1.
type EtcdCluster struct {
	Members []*EtcdMember
}

// EtcdMember is one etcd process of an EtcdCluster.
type EtcdMember struct {
	member
	Name       string // m0, m1, ...
	ClientPort int
	PeerPort   int
	DataDir    string
	id         uint64 // raft member id, learnt once the cluster is up
}

// EtcdOption configures StartEtcd.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	heartbeat, election time.Duration
	args                []string
}

// WithEtcdTiming sets the heartbeat interval and election timeout (defaults 50ms and
// 500ms, so leader changes take about a second; etcd's own are 100ms and 1s). The
// server's minimum lease TTL is about 1.5 × the election timeout.
func WithEtcdTiming(heartbeat, election time.Duration) EtcdOption {
	return func(c *etcdConfig) { c.heartbeat, c.election = heartbeat, election }
}

// WithEtcdArgs appends etcd command-line flags (after the helper's).
func WithEtcdArgs(args ...string) EtcdOption {
	return func(c *etcdConfig) { c.args = append(c.args, args...) }
}

// StartEtcd starts an n-member etcd cluster on free 127.0.0.1 ports (client and peer
// URLs plain http), data directories in t.TempDir(), fsync off, and returns once every member is
// healthy (has a leader). t.Cleanup stops every member by PID.
func StartEtcd(t testing.TB, n int, opts ...EtcdOption) *EtcdCluster {
	t.Helper()
	bin := RequireEtcd(t)
	if n < 1 {
		t.Fatalf("testserver: StartEtcd: n = %d, want at least 1", n)
	}
	cfg := etcdConfig{heartbeat: 50 * time.Millisecond, election: 500 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	var lastErr error
	for range 3 { // fresh ports when one was taken between the check and the bind
		c, err := newEtcdCluster(t, bin, n, cfg)
		if err != nil {
			t.Fatalf("testserver: StartEtcd: %v", err)
		}
		for _, m := range c.Members {
			t.Cleanup(func() { m.cleanup(t) })
		}
		if lastErr = startAll(c.members()); lastErr == nil {
			c.learnIDs(t)
			return c
		}
		for _, m := range c.Members {
			m.cleanup(t)
		}
		if sf, ok := unwrapStartFailure(lastErr); !ok || !sf.portConflict {
			break
		}
	}
	t.Fatalf("testserver: StartEtcd(%d): %v", n, lastErr)
	return nil
}

func unwrapStartFailure(err error) (*startFailure, bool) {
	for err != nil {
		if sf, ok := err.(*startFailure); ok {
			return sf, true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return nil, false
		}
		err = u.Unwrap()
	}
	return nil, false
}

func newEtcdCluster(t testing.TB, bin string, n int, cfg etcdConfig) (*EtcdCluster, error) {
	c := &EtcdCluster{}
	var initial []string
	for i := range n {
		cp, err := freePort(false)
		if err != nil {
			return nil, err
		}
		pp, err := freePort(false)
		if err != nil {
			return nil, err
		}
		m := &EtcdMember{Name: "m" + strconv.Itoa(i), ClientPort: cp, PeerPort: pp, DataDir: filepath.Join(t.TempDir(), "data")}
		initial = append(initial, m.Name+"="+m.PeerURL())
		c.Members = append(c.Members, m)
	}
	token := fmt.Sprintf("lockkit-test-%d-%d", os.Getpid(), c.Members[0].ClientPort)
	for _, m := range c.Members {
		dir := filepath.Dir(m.DataDir)
		args := []string{
			"--name", m.Name,
			"--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL(),
			"--advertise-client-urls", m.ClientURL(),
			"--listen-peer-urls", m.PeerURL(),
			"--initial-advertise-peer-urls", m.PeerURL(),
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", strconv.FormatInt(cfg.heartbeat.Milliseconds(), 10),
			"--election-timeout", strconv.FormatInt(cfg.election.Milliseconds(), 10),
			"--log-level", "warn",
			// No fsync of the WAL and the backend, as ZooKeeper and
			// PostgreSQL here (see StartZooKeeper's forceSync): a killed
			// member keeps what it wrote in the page cache.
			"--unsafe-no-fsync",
		}
		args = append(args, cfg.args...)
		m.member = member{
			name:    fmt.Sprintf("etcd %s %s", m.Name, m.Endpoint()),
			logPath: filepath.Join(dir, "etcd.log"),
			spawn: func() (*process, error) {
				return startProcess(procSpec{path: bin, args: args, dir: dir, logPath: filepath.Join(dir, "etcd.log")})
			},
		}
		m.ready = func(p *process) error {
			return waitReadyWithin(m.name, m.logPath, p, etcdReadyTimeout, m.healthy)
		}
	}
	return c, nil
}

func (c *EtcdCluster) members() []*member {
	out := make([]*member, len(c.Members))
	for i, m := range c.Members {
		out[i] = &m.member
	}
	return out
}

// healthy passes when the member's /health says it has a leader and can serve.
func (m *EtcdMember) healthy() error {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(m.ClientURL() + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"health":"true"`) {
		return fmt.Errorf("/health: %s %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// learnIDs records each member's raft id, so that Leader can name the leader.
func (c *EtcdCluster) learnIDs(t testing.TB) {
	t.Helper()
	for _, m := range c.Members {
		st, err := etcdStatus(m.Endpoint(), 5*time.Second)
		if err != nil {
			t.Fatalf("testserver: status of %s: %v", m.name, err)
		}
		m.id = st.Header.MemberId
	}
}

// Revision is the member's own store revision (its Status, answered without a quorum):
// the revision of the last entry it applied.
func (m *EtcdMember) Revision(timeout time.Duration) (int64, error) {
	st, err := etcdStatus(m.Endpoint(), timeout)
	if err != nil {
		return 0, err
	}
	return st.Header.Revision, nil
}

func etcdStatus(endpoint string, timeout time.Duration) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: timeout})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return cli.Status(ctx, endpoint)
}

// ClientURL is "http://127.0.0.1:CLIENTPORT".
func (m *EtcdMember) ClientURL() string { return "http://" + m.Endpoint() }

// PeerURL is "http://127.0.0.1:PEERPORT".
func (m *EtcdMember) PeerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(m.PeerPort))
}

// Endpoint is "127.0.0.1:CLIENTPORT", as clientv3.Config.Endpoints takes it.
func (m *EtcdMember) Endpoint() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.ClientPort))
}

// Endpoints lists every member's client endpoint, for clientv3.Config.Endpoints.
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint()
	}
	return out
}

// EndpointsString is Endpoints joined by commas (as ETCD_ENDPOINTS takes them).
func (c *EtcdCluster) EndpointsString() string { return strings.Join(c.Endpoints(), ",") }

// Client returns a clientv3 client for every member's endpoint (5s dial timeout),
// closed in t.Cleanup.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("testserver: etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the index of the member that is leader, asking the running members
// (a paused or stopped one is skipped after a short timeout) until a majority of those
// asked agree, for up to timeout. It fails the test when no leader is known by then.
func (c *EtcdCluster) Leader(t testing.TB, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if i, err := c.leaderOnce(); err == nil {
			return i
		} else {
			last = err
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("testserver: etcd: no leader within %v: %v", timeout, last)
	return -1
}

func (c *EtcdCluster) leaderOnce() (int, error) {
	votes := map[uint64]int{}
	for _, m := range c.Members {
		if !m.serving() {
			continue
		}
		st, err := etcdStatus(m.Endpoint(), 500*time.Millisecond)
		if err != nil || st.Leader == 0 {
			continue
		}
		votes[st.Leader]++
	}
	for id, v := range votes {
		if 2*v <= len(c.Members) {
			continue
		}
		for i, m := range c.Members {
			if m.id == id && m.serving() {
				return i, nil
			}
		}
		return -1, fmt.Errorf("leader %x is not a running member", id)
	}
	return -1, fmt.Errorf("no majority names a leader (votes %v)", votes)
}

// RestartAll stops every member, then starts them all again on the same ports with the
// same data, and waits until each is healthy.
func (c *EtcdCluster) RestartAll(t testing.TB) {
	t.Helper()
	for _, m := range c.Members {
		m.Stop(t)
	}
	if err := startAll(c.members()); err != nil {
		t.Fatalf("testserver: etcd RestartAll: %v", err)
	}
}
