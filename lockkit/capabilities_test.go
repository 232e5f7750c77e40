package lockkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
)

// declaring is a backend that does no I/O and declares caps.
type declaring struct{ caps driver.Capabilities }

func (declaring) Acquire(context.Context, *driver.Request) (int64, error) {
	return 0, driver.ErrContended
}
func (declaring) Extend(context.Context, string, string, time.Duration) (bool, error) {
	return false, nil
}
func (declaring) Release(context.Context, string, string) (bool, error) { return false, nil }
func (declaring) Ping(context.Context) error                            { return nil }
func (declaring) Close() error                                          { return nil }
func (d declaring) Capabilities() driver.Capabilities                   { return d.caps }

func specOf(caps driver.Capabilities) driver.Spec {
	return driver.Spec{Name: "fake", Open: func(driver.Config) (driver.Backend, error) { return declaring{caps}, nil }}
}

// A capability flag is a promise that the backend implements the optional
// operation's interface: New refuses a backend that breaks it, naming both.
func TestNewRefusesCapabilitiesWithoutTheirInterface(t *testing.T) {
	for _, c := range []struct {
		caps driver.Capabilities
		want string
	}{
		{driver.Capabilities{FairQueue: true}, "FairQueue but does not implement driver.Queue"},
		{driver.Capabilities{Batching: true}, "Batching but does not implement driver.Batcher"},
		{driver.Capabilities{Routing: true}, "Routing but does not implement driver.Router"},
		{driver.Capabilities{MinTTL: time.Second, MaxTTL: time.Millisecond}, "impossible TTL limits"},
	} {
		c1, err := New(specOf(c.caps))
		if err == nil {
			c1.Close(context.Background())
			t.Errorf("%+v: New succeeded; want an error containing %q", c.caps, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "fake") {
			t.Errorf("%+v: %v; want it to name the fake backend and %q", c.caps, err, c.want)
		}
	}
}

// A backend that declares no fences gets its fencing domains refused with
// its own reason; the health name is the one it declares.
func TestCapabilitiesNoFencesAndName(t *testing.T) {
	c, err := New(specOf(driver.Capabilities{Name: "node-a", NoFences: "counters are per node"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.Domain(DomainSpec{Name: "f", Prefix: "f", Policy: Policy{TTL: time.Second, Fencing: true}}).Err()
	if err == nil || !strings.Contains(err.Error(), "counters are per node") {
		t.Errorf("fencing domain on a backend without fences: %v; want the backend's reason", err)
	}
	if h := c.Health(context.Background()); !strings.Contains(h.Backend, "node-a") {
		t.Errorf("health names %q; want the declared name node-a", h.Backend)
	}
}

// A domain whose TTL the backend cannot keep (under its MinTTL, not a whole
// number of its TTLGranularity, over its MaxTTL) is refused, naming the
// backend and its limit; a TTL within them is accepted.
func TestDomainRefusesTTLOutsideBackendLimits(t *testing.T) {
	c, err := New(specOf(driver.Capabilities{MinTTL: 2 * time.Second, TTLGranularity: time.Second, MaxTTL: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		ttl  time.Duration
		want string // "" for accepted
	}{
		{time.Second, "under the fake backend's minimum 2s"},
		{2500 * time.Millisecond, "not a whole number of the fake backend's TTL unit 1s"},
		{2 * time.Hour, "over the fake backend's maximum 1h0m0s"},
		{3 * time.Second, ""},
		{time.Hour, ""},
	} {
		err := c.Domain(DomainSpec{Name: "d", Prefix: "d", Policy: Policy{TTL: tc.ttl}}).Err()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("TTL %v: %v; want it accepted", tc.ttl, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("TTL %v: %v; want an error containing %q", tc.ttl, err, tc.want)
		}
	}
}
