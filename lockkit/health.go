package lockkit

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/lockkit/lockkit/breaker"
)

// Health is a point-in-time report on the backend, as served by
// HealthHandler.
type Health struct {
	// Healthy is true when the backend answered a PING and its breakers
	// still let locks be granted: none open, or for Redlock fewer than a
	// majority.
	Healthy bool `json:"healthy"`
	// Backend names the backend node(s).
	Backend string `json:"backend"`
	// Breakers lists each node breaker's state: closed, half_open or open.
	Breakers []BreakerHealth `json:"breakers"`
	// RTTMillis is the PING round trip in milliseconds; 0 when PING failed.
	RTTMillis float64 `json:"rtt_ms"`
	// Error says why the backend is not healthy.
	Error string `json:"error,omitempty"`
}

// BreakerHealth is one node breaker's state.
type BreakerHealth struct {
	Node  string `json:"node"`
	State string `json:"state"`
}

// Health pings the backend and reads the breakers' states.
func (c *Client) Health(ctx context.Context) Health {
	if err := c.usable(); err != nil {
		return Health{Error: err.Error()}
	}
	start := time.Now()
	err := c.Ping(ctx)
	h := Health{Healthy: err == nil}
	if err != nil {
		h.Error = err.Error()
	} else {
		h.RTTMillis = float64(time.Since(start).Microseconds()) / 1000
	}
	var open []string
	for i, b := range c.breakers() {
		if i > 0 {
			h.Backend += ","
		}
		h.Backend += b.Name()
		st := b.State()
		h.Breakers = append(h.Breakers, BreakerHealth{Node: b.Name(), State: st.String()})
		if st == breaker.StateOpen {
			open = append(open, b.Name())
		}
	}
	tolerated := c.caps.Tolerated
	if len(open) > tolerated {
		h.Healthy = false
		if h.Error == "" {
			h.Error = "circuit breaker open for " + strings.Join(open, ", ")
		}
	}
	return h
}

// HealthHandler serves Health as JSON: 200 when healthy, 503 while the
// backend is unreachable or a breaker is open. Mount it where the
// orchestrator's readiness probe looks.
func (c *Client) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := c.Health(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !h.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
}
