// Package deploy holds what operators install beside lockkit: Prometheus
// alerting rules (prometheus/) and a Grafana dashboard (grafana/). Its tests
// run promtool on the rules and check every metric, label and label value
// the files name against lockkit's telemetry catalog.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/telemetry"
)

const (
	rulesFile     = "prometheus/lockkit-rules.yml"
	rulesTestFile = "lockkit-rules.test.yml" // in prometheus/
	dashboardFile = "grafana/lockkit-dashboard.json"
)

// TestPromtool runs `promtool check rules` and `promtool test rules`: the
// rules parse, and each alert fires on a history that should fire it and
// stays silent on one that should not.
func TestPromtool(t *testing.T) {
	promtool := testserver.RequirePromtool(t)
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", rulesTestFile)
	cmd.Dir = "prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// promNames is the catalog as the OpenTelemetry Prometheus exporter exposes
// it: metric series names, label names, and each enumerated label's values.
func promNames() (series map[string]bool, labels map[string][]string) {
	series, labels = map[string]bool{}, map[string][]string{"le": nil}
	for _, e := range telemetry.Catalog() {
		name := strings.ReplaceAll(e.Name, ".", "_")
		switch e.Kind {
		case telemetry.KindAttribute:
			labels[name] = e.Values
		case telemetry.KindMetric:
			if e.Unit == "s" {
				name += "_seconds"
			}
			switch e.Type {
			case "histogram":
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					series[name+s] = true
				}
			case "counter":
				series[name+"_total"] = true
			default:
				series[name] = true
			}
		}
	}
	return series, labels
}

var (
	metricRE   = regexp.MustCompile(`\blockkit_[a-z_]+\b`)
	matcherRE  = regexp.MustCompile(`\b(lockkit_[a-z_]+)\s*(?:=~|!=|=)\s*"([^"]*)"`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// checkExpr fails t for any lockkit_* metric or label in expr that the
// catalog does not have, and for a label value outside an enumerated label's
// values. Recording-rule names (lockkit:...) are the rules' own.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	series, labels := promNames()
	for _, m := range matcherRE.FindAllStringSubmatch(expr, -1) {
		vals, ok := labels[m[1]]
		switch {
		case !ok:
			t.Errorf("%s: label %s is not in the telemetry catalog", where, m[1])
		case len(vals) > 0 && !strings.HasPrefix(m[2], "$") && !slices.Contains(vals, m[2]):
			t.Errorf("%s: %s=%q: not one of the catalog's values %v", where, m[1], m[2], vals)
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				if _, ok := labels[l]; !ok {
					t.Errorf("%s: grouping label %s is not in the telemetry catalog", where, l)
				}
			}
		}
	}
	for _, name := range metricRE.FindAllString(expr, -1) {
		_, isLabel := labels[name]
		if !series[name] && !isLabel {
			t.Errorf("%s: %s is neither a metric series nor a label of the telemetry catalog", where, name)
		}
	}
}

// TestRulesMatchCatalog: every metric, label and label value a rule names
// exists; a rename in the catalog fails here, not silently in production.
func TestRulesMatchCatalog(t *testing.T) {
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			checkExpr(t, rulesFile+": "+r.Alert+r.Record, r.Expr)
			if r.Alert != "" {
				alerts++
			}
		}
	}
	if alerts < 4 {
		t.Errorf("%d alerts, want the retry ratio, latency, lost leases and breaker alerts", alerts)
	}
}

// TestDashboardMatchesCatalog: every panel query of the Grafana dashboard
// names only catalog metrics and labels, and uses only recording rules the
// rules file defines.
func TestDashboardMatchesCatalog(t *testing.T) {
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, dashboardFile+": "+p.Title, q.Expr)
			for _, rec := range regexp.MustCompile(`lockkit:[a-z0-9_:]+`).FindAllString(q.Expr, -1) {
				if !strings.Contains(string(rules), "record: "+rec) {
					t.Errorf("%s: panel %q uses recording rule %s, which %s does not define", dashboardFile, p.Title, rec, rulesFile)
				}
			}
		}
	}
}

// TestCheckerCatchesUnknownNames: the checker itself fails on a metric,
// label or value the catalog does not have (a checker that cannot fail
// proves nothing).
func TestCheckerCatchesUnknownNames(t *testing.T) {
	for _, bad := range []string{
		`rate(lockkit_acquires_total[5m])`,
		`sum by (lockkit_dommain) (rate(lockkit_releases_total[5m]))`,
		`lockkit_leases_lost_total{lockkit_lost_cause="stolen"}`,
	} {
		ft := &testing.T{}
		done := make(chan struct{})
		go func() { defer close(done); checkExpr(ft, "bad", bad) }()
		<-done
		if !ft.Failed() {
			t.Errorf("checkExpr accepted %s", bad)
		}
	}
}
