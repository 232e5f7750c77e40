package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// TestPrometheusAlertFires is the alert rules end to end: a real Prometheus
// server (Debian's package, on a loopback port) scrapes a process that makes
// a lock contended (internal/e2e/cmd/contender, exporting through
// otelsetup with OTEL_METRICS_EXPORTER=prometheus), evaluates
// deploy/prometheus/lockkit-rules.yml, and LockkitAcquireRetriesHigh goes to
// firing on the server's API. The shipped rules are used as they are except
// for their `for:` durations (10 minutes in production, 0 here) and a 1 s
// evaluation interval, so the test is bounded.
func TestPrometheusAlertFires(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequirePromtool(t)
	root := moduleRoot(t)
	bins := buildPrograms(t, root, "./internal/e2e/cmd/contender")
	r := testserver.StartRedis(t)

	// The contender, serving /metrics on a free port.
	port := freeTCPPort(t)
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "OTEL_") || name == "REDIS_URL" || strings.HasPrefix(name, "LOCKKIT_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "REDIS_URL=redis://"+r.Addr(), "OTEL_METRICS_EXPORTER=prometheus",
		"OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT="+port)
	cmd := exec.Command(bins["./internal/e2e/cmd/contender"], "-for", "40s")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID; a no-op once it has exited
		<-done
	})

	// Prometheus with the shipped rules, `for:` set to 0.
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "lockkit-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	fast := regexp.MustCompile(`(?m)^(\s+)for: .*$`).ReplaceAll(rules, []byte("${1}for: 0s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), fast, 0o644); err != nil {
		t.Fatal(err)
	}
	prom := testserver.StartPrometheus(t, dir, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: contender
    static_configs:
      - targets: ["127.0.0.1:%s"]
`, port))

	deadline := time.Now().Add(35 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		firing, body := alertState(t, prom.URL(), "LockkitAcquireRetriesHigh")
		last = body
		if firing {
			t.Logf("LockkitAcquireRetriesHigh firing: %s", body)
			// The scraped series carry the catalog's names.
			if _, q := query(t, prom.URL(), `lockkit:acquire_retry_ratio:rate5m{lockkit_domain="table"}`); !strings.Contains(q, `"lockkit_domain":"table"`) {
				t.Errorf("recording rule has no table series: %s", q)
			}
			return
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("the contender ended (%v) before the alert fired:\n%s\nalerts: %s", err, out.String(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
	_, q := query(t, prom.URL(), `lockkit_acquire_attempts_count`)
	t.Fatalf("LockkitAcquireRetriesHigh did not fire within 35s; alerts: %s\nseries: %s", last, q)
}

func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// alertState reports whether alert is firing on the server, and the raw
// /api/v1/alerts answer.
func alertState(t *testing.T, base, alert string) (bool, string) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == alert && a.State == "firing" {
			return true, string(raw)
		}
	}
	return false, string(raw)
}

func query(t *testing.T, base, q string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/api/v1/query", nil)
	if err != nil {
		t.Fatal(err)
	}
	v := req.URL.Query()
	v.Set("query", q)
	req.URL.RawQuery = v.Encode()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	return resp.StatusCode, string(raw)
}
