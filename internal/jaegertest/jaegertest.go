// Package jaegertest runs a real Jaeger v2 (the all-in-one `jaeger` binary, an
// OpenTelemetry Collector distribution) for end-to-end telemetry tests: in-memory
// storage, an OTLP receiver and the query API, every port on 127.0.0.1 and chosen
// free by the test.
//
// The binary is built from the pinned tools module in tools/jaeger by
//
//	bash .ci/build-jaeger.sh
//
// and found through $LOCKKIT_JAEGER_BIN, or else in the script's cache dir
// (${LOCKKIT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin}/jaeger). When
// it is missing, Start skips the test, or fails it under CI=true.
//
// The binary built from the Go module carries no UI assets: QueryURL serves a
// placeholder page, while the HTTP API (/api/traces, /api/services) works.
package jaegertest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// Timeouts, generous for a loaded 2-core CI machine.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
	queryTimeout = 20 * time.Second
	pollInterval = 100 * time.Millisecond
)

//go:embed config.yaml.tmpl
var configText string

var configTemplate = template.Must(template.New("jaeger.yaml").Option("missingkey=error").Parse(configText))

// ports are the listening ports of one Jaeger; the config template's data.
type ports struct {
	OTLPGRPC  int
	OTLPHTTP  int
	QueryHTTP int
	QueryGRPC int
}

// Jaeger is one running Jaeger process, stopped when its test ends.
type Jaeger struct {
	cmd     *exec.Cmd
	ports   ports
	logPath string
	exited  chan struct{} // closed when the process has exited
	waitErr error         // set before exited is closed
	client  *http.Client
}

// BinaryPath returns where Start looks for the jaeger binary: $LOCKKIT_JAEGER_BIN,
// or the cache dir of .ci/build-jaeger.sh.
func BinaryPath() string {
	if p := os.Getenv("LOCKKIT_JAEGER_BIN"); p != "" {
		return p
	}
	return filepath.Join(testserver.ToolsBinDir(), "jaeger")
}

// Start runs a Jaeger for the test and waits until it accepts OTLP and answers
// queries. It is stopped (SIGTERM, then SIGKILL) by PID in t.Cleanup. When the
// binary is missing it skips the test, or fails it when CI=true.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := BinaryPath()
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		msg := fmt.Sprintf("jaeger binary not found at %q; build it with `bash .ci/build-jaeger.sh` "+
			"(or point LOCKKIT_JAEGER_BIN at one)", bin)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// Free ports are found by binding :0 and closing, so another process may take
	// one before Jaeger binds it; retry with fresh ports when Jaeger exits early.
	var lastErr error
	for try := 1; try <= 3; try++ {
		j, err := start(t, bin, try)
		if err == nil {
			return j
		}
		lastErr = err
		t.Logf("jaegertest: start attempt %d: %v", try, err)
	}
	t.Fatalf("jaegertest: could not start jaeger: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string, try int) (*Jaeger, error) {
	p, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		ports:  ports{OTLPGRPC: p[0], OTLPHTTP: p[1], QueryHTTP: p[2], QueryGRPC: p[3]},
		exited: make(chan struct{}),
		// No proxy: everything is on loopback.
		client: &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 5 * time.Second},
	}
	dir := t.TempDir()
	configPath := filepath.Join(dir, "jaeger.yaml")
	var cfg bytes.Buffer
	if err := configTemplate.Execute(&cfg, j.ports); err != nil {
		return nil, fmt.Errorf("config template: %w", err)
	}
	if err := os.WriteFile(configPath, cfg.Bytes(), 0o644); err != nil {
		return nil, err
	}
	j.logPath = filepath.Join(dir, fmt.Sprintf("jaeger-%d.log", try))
	logFile, err := os.Create(j.logPath)
	if err != nil {
		return nil, err
	}

	j.cmd = exec.Command(bin, "--config", "file:"+configPath)
	j.cmd.Dir = dir
	j.cmd.Stdout = logFile
	j.cmd.Stderr = logFile
	j.cmd.Env = append(os.Environ(), "JAEGER_LISTEN_HOST=127.0.0.1")
	j.cmd.SysProcAttr = sysProcAttr()
	if err := j.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		j.waitErr = j.cmd.Wait()
		logFile.Close()
		close(j.exited)
	}()
	t.Cleanup(func() {
		j.stop(t)
		if t.Failed() {
			t.Logf("jaeger log (%s):\n%s", j.logPath, j.logTail(8000))
		}
	})

	if err := j.waitReady(); err != nil {
		j.stop(t)
		return nil, fmt.Errorf("%w\njaeger log:\n%s", err, j.logTail(4000))
	}
	return j, nil
}

// waitReady waits until the OTLP receiver accepts connections and the query API
// answers, or the process exits, or startTimeout passes.
func (j *Jaeger) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-j.exited:
			return fmt.Errorf("jaeger exited during startup: %v", j.waitErr)
		default:
		}
		if j.ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jaeger not ready after %v", startTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func (j *Jaeger) ready() bool {
	for _, port := range []int{j.ports.OTLPHTTP, j.ports.OTLPGRPC} {
		c, err := net.DialTimeout("tcp", hostPort(port), time.Second)
		if err != nil {
			return false
		}
		c.Close()
	}
	resp, err := j.client.Get(j.QueryURL() + "/api/services")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop terminates the process by its PID: SIGTERM, then SIGKILL after stopTimeout.
func (j *Jaeger) stop(t testing.TB) {
	select {
	case <-j.exited:
		return
	default:
	}
	if err := j.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Logf("jaegertest: SIGTERM pid %d: %v", j.cmd.Process.Pid, err)
	}
	select {
	case <-j.exited:
	case <-time.After(stopTimeout):
		t.Logf("jaegertest: pid %d did not stop in %v, killing it", j.cmd.Process.Pid, stopTimeout)
		_ = j.cmd.Process.Kill()
		<-j.exited
	}
}

func (j *Jaeger) logTail(n int) string {
	b, err := os.ReadFile(j.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// PID returns the process id of the running Jaeger.
func (j *Jaeger) PID() int { return j.cmd.Process.Pid }

// OTLPHTTPEndpoint returns the OTLP/HTTP receiver's base URL, "http://127.0.0.1:PORT",
// the value for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces).
func (j *Jaeger) OTLPHTTPEndpoint() string { return "http://" + hostPort(j.ports.OTLPHTTP) }

// OTLPGRPCEndpoint returns the OTLP/gRPC receiver's address, "127.0.0.1:PORT".
func (j *Jaeger) OTLPGRPCEndpoint() string { return hostPort(j.ports.OTLPGRPC) }

// QueryURL returns the base URL of the query service (HTTP API and UI).
func (j *Jaeger) QueryURL() string { return "http://" + hostPort(j.ports.QueryHTTP) }

// Ports returns every port the config makes Jaeger listen on.
func (j *Jaeger) Ports() []int {
	return []int{j.ports.OTLPGRPC, j.ports.OTLPHTTP, j.ports.QueryHTTP, j.ports.QueryGRPC}
}

// Traces returns the traces stored for service, polling (bounded) until there is at
// least one; it fails the test when none arrives in time.
func (j *Jaeger) Traces(t testing.TB, service string) []Trace {
	t.Helper()
	var traces []Trace
	j.poll(t, fmt.Sprintf("traces of service %q", service), func() (bool, error) {
		var err error
		traces, err = j.FetchTraces(context.Background(), service)
		return len(traces) > 0, err
	})
	return traces
}

// WaitForSpan polls (bounded) until a span named operation of service is stored,
// and returns it with its trace; it fails the test when none arrives in time.
func (j *Jaeger) WaitForSpan(t testing.TB, service, operation string) (Trace, Span) {
	t.Helper()
	var tr Trace
	var sp Span
	j.poll(t, fmt.Sprintf("span %q of service %q", operation, service), func() (bool, error) {
		traces, err := j.FetchTraces(context.Background(), service)
		for _, candidate := range traces {
			if s, ok := candidate.Span(operation); ok {
				tr, sp = candidate, s
				return true, nil
			}
		}
		return false, err
	})
	return tr, sp
}

func (j *Jaeger) poll(t testing.TB, what string, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(queryTimeout)
	var lastErr error
	for {
		ok, err := done()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaegertest: no %s after %v (last error: %v)", what, queryTimeout, lastErr)
		}
		time.Sleep(pollInterval)
	}
}

// FetchTraces queries /api/traces?service=... once and returns what is stored (at
// most 1000 traces of the last hour).
func (j *Jaeger) FetchTraces(ctx context.Context, service string) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {"1000"}, "lookback": {"1h"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+"/api/traces?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body apiResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET %s: %s: decoding: %w", req.URL, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %v", req.URL, resp.Status, body.Errors)
	}
	traces := make([]Trace, 0, len(body.Data))
	for _, at := range body.Data {
		traces = append(traces, at.convert())
	}
	return traces, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePorts returns n distinct free TCP ports on 127.0.0.1, holding them all open
// until every one is chosen so they differ.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

var errNotLinux = errors.New("jaegertest: listening sockets are read from /proc, Linux only")

// Socket is one listening TCP socket, or bound UDP socket, of a process.
type Socket struct {
	Proto string // "tcp" or "udp"
	Addr  netip.AddrPort
}

func (s Socket) String() string { return s.Proto + " " + s.Addr.String() }

// ListeningSockets returns every listening TCP socket and bound UDP socket that the
// Jaeger process holds, read from /proc/PID/fd and /proc/PID/net/{tcp,tcp6,udp,udp6}
// (what `ss -ltnup` shows for the PID).
func (j *Jaeger) ListeningSockets() ([]Socket, error) {
	return ListeningSockets(j.PID())
}

// ListeningSockets returns every listening TCP socket and bound UDP socket of the
// process pid. Linux only.
func ListeningSockets(pid int) ([]Socket, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	var out []Socket
	for _, f := range []struct {
		proto, file string
		state       string // listening TCP, or unconnected UDP
	}{
		{"tcp", "tcp", "0A"}, {"tcp", "tcp6", "0A"}, {"udp", "udp", "07"}, {"udp", "udp6", "07"},
	} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", f.file))
		if errors.Is(err, os.ErrNotExist) {
			continue // e.g. no IPv6
		}
		if err != nil {
			return nil, err
		}
		entries, err := parseProcNet(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.file, err)
		}
		for _, e := range entries {
			if e.state == f.state && inodes[e.inode] {
				out = append(out, Socket{Proto: f.proto, Addr: e.local})
			}
		}
	}
	return out, nil
}

// socketInodes returns the inodes of the sockets among pid's open files.
func socketInodes(pid int) (map[string]bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && runtime.GOOS != "linux" {
			return nil, errNotLinux
		}
		return nil, err
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(s, "]")] = true
		}
	}
	return inodes, nil
}
