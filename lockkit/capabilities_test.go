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
		{driver.Capabilities{ServerQueue: true}, "ServerQueue but does not implement driver.Waiter"},
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
