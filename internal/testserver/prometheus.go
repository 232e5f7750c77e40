package testserver

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

const prometheusInstall = "apt-get install -y prometheus"

// RequirePromtool returns the path of promtool (Debian's prometheus package).
// When it is missing the test fails under CI=true and is skipped otherwise,
// with the install command.
func RequirePromtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		missing(t, fmt.Errorf("promtool not found in $PATH; install with: %s", prometheusInstall))
	}
	return p
}

// Prometheus is a real Prometheus server (Debian's prometheus package) on a
// free loopback port, with its data in a temporary directory, stopped by PID
// when the test ends.
type Prometheus struct {
	addr string
	proc *process
}

// StartPrometheus starts Prometheus with config (a prometheus.yml body; rule
// files it names are resolved relative to dir, the config's directory,
// which the caller fills). It fails the test when the server does not come
// up, and skips or fails like RequirePromtool when it is not installed.
func StartPrometheus(t testing.TB, dir, config string) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		missing(t, fmt.Errorf("prometheus not found in $PATH; install with: %s", prometheusInstall))
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 3 {
		port, err := freePort(false)
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		logPath := filepath.Join(dir, "prometheus.log")
		p, err := startProcess(procSpec{
			path: bin,
			args: []string{
				"--config.file=" + cfg,
				"--storage.tsdb.path=" + filepath.Join(dir, "data"),
				"--web.listen-address=" + addr,
			},
			dir:     dir,
			logPath: logPath,
		})
		if err != nil {
			t.Fatal(err)
		}
		err = waitReady("prometheus", logPath, p, func() error {
			resp, err := http.Get("http://" + addr + "/-/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/-/ready: %s", resp.Status)
			}
			return nil
		})
		if err == nil {
			srv := &Prometheus{addr: addr, proc: p}
			t.Cleanup(func() { _, _ = p.stop(syscall.SIGTERM, stopGrace) })
			return srv
		}
		lastErr = err
		_ = p.kill()
		var sf *startFailure
		if !errors.As(err, &sf) || !sf.portConflict {
			break
		}
	}
	t.Fatalf("testserver: %v", lastErr)
	return nil
}

// URL is the server's base URL, for its HTTP API.
func (p *Prometheus) URL() string { return "http://" + p.addr }
