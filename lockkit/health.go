package lockkit

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/lockkit/lockkit/breaker"
)

// Health is a point-in-time report on the backend, as served by
// HealthHandler.
type Health struct {
	// Healthy is true when the backend answered a PING and no breaker is open.
	Healthy bool `json:"healthy"`
	// Backend names the backend node(s).
	Backend string `json:"backend"`
	// Breakers lists each node breaker's state: closed, half-open or open.
	Breakers []BreakerHealth `json:"breakers"`
	// RTT is the PING round trip, in milliseconds.
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
	start := time.Now()
	err := c.Ping(ctx)
	h := Health{Healthy: err == nil, RTTMillis: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		h.Error = err.Error()
	}
	for i, b := range c.breakers.all() {
		if i > 0 {
			h.Backend += ","
		}
		h.Backend += b.Name()
		st := b.State()
		h.Breakers = append(h.Breakers, BreakerHealth{Node: b.Name(), State: st.String()})
		if st == breaker.StateOpen {
			h.Healthy = false
			if h.Error == "" {
				h.Error = "circuit breaker for " + b.Name() + " is open"
			}
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
