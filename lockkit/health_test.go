package lockkit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/testserver"
)

// healthReply is one answer of HealthHandler, decoded with the field names
// the JSON contract promises (a renamed tag shows as a missing field).
type healthReply struct {
	Code        int
	ContentType string
	Body        string
	Fields      map[string]json.RawMessage
	Healthy     bool
	Backend     string
	Breakers    []struct {
		Node  string `json:"node"`
		State string `json:"state"`
	}
	RTTMillis float64
	Error     string
}

// serveHealth calls c's HealthHandler once, as a readiness probe would.
func serveHealth(t *testing.T, c *Client) healthReply {
	t.Helper()
	rec := httptest.NewRecorder()
	c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	h := healthReply{Code: rec.Code, ContentType: rec.Header().Get("Content-Type"), Body: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &h.Fields); err != nil {
		t.Fatalf("health body %q: %v", h.Body, err)
	}
	for _, f := range []struct {
		name string
		dst  any
	}{{"healthy", &h.Healthy}, {"backend", &h.Backend}, {"breakers", &h.Breakers}, {"rtt_ms", &h.RTTMillis}} {
		raw, ok := h.Fields[f.name]
		if !ok {
			t.Fatalf("health body %s has no %q field", h.Body, f.name)
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			t.Fatalf("health body field %q: %v", f.name, err)
		}
	}
	if raw, ok := h.Fields["error"]; ok {
		if err := json.Unmarshal(raw, &h.Error); err != nil {
			t.Fatalf("health body field \"error\": %v", err)
		}
	}
	if h.ContentType != "application/json" {
		t.Fatalf("health Content-Type = %q", h.ContentType)
	}
	if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("health Cache-Control = %q, want no-store", cc)
	}
	return h
}

// state is the single node breaker's state in the reply.
func (h healthReply) state(t *testing.T) string {
	t.Helper()
	if len(h.Breakers) != 1 {
		t.Fatalf("health lists %d breakers, want 1: %s", len(h.Breakers), h.Body)
	}
	return h.Breakers[0].State
}

// wantHealthy checks a 200 whose one breaker is in state.
func wantHealthy(t *testing.T, h healthReply, state string) {
	t.Helper()
	if h.Code != http.StatusOK || !h.Healthy || h.Error != "" {
		t.Fatalf("health = %d %s, want 200, healthy, no error", h.Code, h.Body)
	}
	if _, ok := h.Fields["error"]; ok {
		t.Fatalf("healthy reply carries an error field: %s", h.Body)
	}
	if got := h.state(t); got != state {
		t.Fatalf("health breaker state = %q, want %q: %s", got, state, h.Body)
	}
	if !(h.RTTMillis > 0) {
		t.Fatalf("health rtt_ms = %v, want > 0: %s", h.RTTMillis, h.Body)
	}
}

// wantUnhealthy checks a 503 with an error, and returns the breaker state.
func wantUnhealthy(t *testing.T, h healthReply) string {
	t.Helper()
	if h.Code != http.StatusServiceUnavailable || h.Healthy || h.Error == "" {
		t.Fatalf("health = %d %s, want 503, not healthy, with an error", h.Code, h.Body)
	}
	return h.state(t)
}

// The health handler follows the backend and the breaker: healthy; server
// killed (breaker still closed, since only acquisitions feed it); breaker
// open while the server is down; breaker open with the server back (PING
// answers, still 503, saying the breaker is open); half-open (200: a probe
// must be able to get through); closed again after a successful acquisition.
func TestHealthFollowsBackendAndBreaker(t *testing.T) {
	r := testserver.StartRedis(t)
	const openTimeout = 2 * time.Second
	rec := &transitionLog{}
	c := newClient(t, r, WithCommandTimeout(200*time.Millisecond),
		WithBreaker(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: openTimeout, OnStateChange: rec.record}))
	l := lockOn(testDomain(t, c, Policy{TTL: 2 * time.Second}), "h")

	h := serveHealth(t, c)
	wantHealthy(t, h, "closed")
	if h.Backend != r.Addr() || h.Breakers[0].Node != r.Addr() {
		t.Fatalf("health names backend %q, breaker node %q, want %q", h.Backend, h.Breakers[0].Node, r.Addr())
	}
	if ch := c.Health(t.Context()); !ch.Healthy || len(ch.Breakers) != 1 || ch.Breakers[0].State != "closed" || ch.RTTMillis <= 0 {
		t.Fatalf("Health() = %+v", ch)
	}

	r.Kill(t)
	h = serveHealth(t, c)
	if st := wantUnhealthy(t, h); st != "closed" {
		t.Fatalf("server killed, no acquisition yet: breaker %q, want closed (only acquisitions feed it)", st)
	}
	if !strings.Contains(h.Error, "unavailable") {
		t.Fatalf("server killed: health error %q, want it to say the backend is unavailable", h.Error)
	}

	// Trip it: ConsecutiveFailures acquisitions on a dead server.
	for i := range 3 {
		if _, err := l.TryAcquire(t.Context()); !errors.Is(err, ErrUnavailable) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("acquisition %d on a dead server = %v, want ErrUnavailable, not yet ErrOpen", i, err)
		}
	}
	if _, err := l.TryAcquire(t.Context()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after 3 failures: %v, want ErrOpen", err)
	}
	openedAt := rec.lastAt()
	if st := wantUnhealthy(t, serveHealth(t, c)); st != "open" {
		t.Fatalf("server down, breaker tripped: state %q, want open", st)
	}

	r.Restart(t)
	// PING answers again, but the breaker is still open: 503, saying so.
	h = serveHealth(t, c)
	if time.Since(openedAt) < openTimeout-100*time.Millisecond {
		if st := wantUnhealthy(t, h); st != "open" {
			t.Fatalf("server back, within OpenTimeout: state %q, want open", st)
		}
		if !strings.Contains(h.Error, "breaker") || !strings.Contains(h.Error, r.Addr()) || !strings.Contains(h.Error, "open") {
			t.Fatalf("server back, breaker open: health error %q, want it to say %s's breaker is open", h.Error, r.Addr())
		}
	} else {
		t.Logf("restart took %v, longer than OpenTimeout %v: the open-but-reachable reply was not checked", time.Since(openedAt), openTimeout)
	}

	// Once OpenTimeout has passed the breaker reports half-open, which is
	// healthy: a readiness probe failing now would keep away the very
	// acquisitions that probe the node and close the circuit.
	pollFor(t, openTimeout+3*time.Second, "breaker half-open", func() bool {
		return c.Health(t.Context()).Breakers[0].State == "half_open"
	})
	wantHealthy(t, serveHealth(t, c), "half_open")

	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("probe acquisition after restart: %v", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, serveHealth(t, c), "closed")
	rec.wantSequence(t, "closed>open,open>half_open,half_open>closed")
}

// While the server is frozen (SIGSTOP) PING times out at the command timeout:
// the handler answers 503 within about that time, not hanging with the
// server, and 200 after SIGCONT.
func TestHealthServerStopped(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r, WithCommandTimeout(150*time.Millisecond))
	wantHealthy(t, serveHealth(t, c), "closed")
	r.Pause(t)
	start := time.Now()
	h := serveHealth(t, c)
	took := time.Since(start)
	r.Resume(t)
	if st := wantUnhealthy(t, h); st != "closed" {
		t.Fatalf("stopped server, no acquisition: breaker %q, want closed", st)
	}
	t.Logf("health answered %d in %v while the server was stopped: %s", h.Code, took.Round(time.Millisecond), strings.TrimSpace(h.Body))
	pollFor(t, 5*time.Second, "health 200 after SIGCONT", func() bool { return serveHealth(t, c).Code == http.StatusOK })
	wantHealthy(t, serveHealth(t, c), "closed")
}
