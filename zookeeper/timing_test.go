package zookeeper

import (
	"strings"
	"testing"
	"time"
)

// The session timeout a TTL asks for, and the TTLs the declared bounds
// admit: the TTL itself unless the ensemble's timing is declared; with it,
// 2 × TTL + 3/2 × (syncLimit × tickTime + tickTime), and only TTLs whose
// timeout lies within the session timeout bounds. A timing that is not one
// (a zero tick, no syncLimit, a tick not in whole ms) or that leaves no TTL
// is refused at New, saying why.
func TestEnsembleTiming(t *testing.T) {
	undeclared := options{minSession: 4 * time.Second, maxSession: 40 * time.Second}
	if got := undeclared.sessionTimeout(10 * time.Second); got != 10*time.Second {
		t.Errorf("undeclared: session timeout for a 10s TTL = %v, want the TTL", got)
	}
	if lo, hi := undeclared.ttlBounds(); lo != 4*time.Second || hi != 40*time.Second {
		t.Errorf("undeclared: TTL bounds %v–%v, want the session bounds 4s–40s", lo, hi)
	}

	// ZooKeeper's sample zoo.cfg: tickTime 2s, syncLimit 5 (S = 10s).
	o := options{minSession: 4 * time.Second, maxSession: 40 * time.Second, tick: 2 * time.Second, syncLimit: 5, timingSet: true}
	if got, want := o.sessionTimeout(5*time.Second), 10*time.Second+18*time.Second; got != want {
		t.Errorf("declared: session timeout for a 5s TTL = %v, want %v", got, want)
	}
	lo, hi := o.ttlBounds()
	if lo != time.Millisecond || hi != 11*time.Second {
		t.Errorf("declared: TTL bounds %v–%v, want 1ms–11s ((40s − 18s) / 2)", lo, hi)
	}
	if o.sessionTimeout(hi) > o.maxSession || o.sessionTimeout(hi+time.Millisecond) <= o.maxSession {
		t.Errorf("declared: %v is not the largest TTL within maxSessionTimeout", hi)
	}
	b := &backend{o: o}
	if err := b.ttlError(hi); err != nil {
		t.Errorf("ttl %v: %v", hi, err)
	}
	err := b.ttlError(12 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "WithEnsembleTiming") || !strings.Contains(err.Error(), "42s") || !strings.Contains(err.Error(), "11s") {
		t.Errorf("ttl 12s: %v, want a refusal naming the 42s session timeout it needs, the option and the largest TTL (11s)", err)
	}
	if c := b.Capabilities(); c.MinTTL != lo || c.MaxTTL != hi {
		t.Errorf("Capabilities TTLs %v–%v, want %v–%v", c.MinTTL, c.MaxTTL, lo, hi)
	}

	// A minSessionTimeout above the timing's own lag: the smallest TTL
	// reaches it.
	o2 := options{minSession: 10 * time.Second, maxSession: 60 * time.Second, tick: 100 * time.Millisecond, syncLimit: 20, timingSet: true}
	lo2, _ := o2.ttlBounds()
	if o2.sessionTimeout(lo2) < o2.minSession || o2.sessionTimeout(lo2-time.Millisecond) >= o2.minSession {
		t.Errorf("minimum TTL %v: session timeout %v, want the smallest TTL whose timeout reaches %v", lo2, o2.sessionTimeout(lo2), o2.minSession)
	}

	// A lag that is not whole milliseconds (3/2 × 5 ticks of 25ms =
	// 187.5ms) is rounded up: go-zookeeper sends whole milliseconds, and a
	// grant of less than asked fails.
	odd := options{minSession: 50 * time.Millisecond, maxSession: 10 * time.Second, tick: 25 * time.Millisecond, syncLimit: 4, timingSet: true}
	if got, want := odd.sessionTimeout(time.Second), 2*time.Second+188*time.Millisecond; got != want {
		t.Errorf("tick 25ms, syncLimit 4: session timeout for a 1s TTL = %v, want %v", got, want)
	}

	// Bounds not declared: 2 and 20 ticks of the declared tick.
	nb := newOptions(WithEnsembleTiming(100*time.Millisecond, 20))
	if nb.minSession != 200*time.Millisecond || nb.maxSession != 2*time.Second {
		t.Errorf("tick 100ms, no WithSessionTimeouts: bounds %v–%v, want 200ms–2s", nb.minSession, nb.maxSession)
	}
	if d := newOptions(); d.minSession != 4*time.Second || d.maxSession != 40*time.Second {
		t.Errorf("nothing declared: bounds %v–%v, want 4s–40s", d.minSession, d.maxSession)
	}

	for _, bad := range []struct {
		tick  time.Duration
		limit int
		want  string
	}{
		{0, 5, "tickTime"},
		{2 * time.Second, 0, "syncLimit"},
		{1500 * time.Microsecond, 5, "whole milliseconds"},
		{2 * time.Second, -1, "syncLimit"},
		{10 * time.Second, 10, "leaves no TTL"}, // (S + tick) × 3/2 = 165s > 40s
		{time.Second, 1 << 30, "syncLimit"},     // an overflow, not a timing
	} {
		o := options{root: defaultRoot, minSession: 4 * time.Second, maxSession: 40 * time.Second}
		WithEnsembleTiming(bad.tick, bad.limit).set(&o)
		err := o.check()
		if err == nil || !strings.Contains(err.Error(), "WithEnsembleTiming") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("WithEnsembleTiming(%v, %d): %v, want a refusal saying %q", bad.tick, bad.limit, err, bad.want)
		}
	}
}
