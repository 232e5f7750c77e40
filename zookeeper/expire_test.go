package zookeeper

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestExpireAgainstExtend: the backend's own expiry of an acquisition and
// an extend's answer that race must agree. Before, expire read the lease's
// end, let go of the acquisition, and gave it up after: an extend answered
// in between was told the lease was kept (the Client counts it valid) while
// its node went to the sweeper, and the lock to the next in line.
func TestExpireAgainstExtend(t *testing.T) {
	b := &backend{acqs: map[acqKey]*acq{}}
	const rounds = 20000
	var keptAndGivenUp, kept int
	for i := range rounds {
		a := &acq{k: acqKey{"k", strconv.Itoa(i)}, until: time.Now().Add(-time.Millisecond)}
		b.mu.Lock()
		b.acqs[a.k] = a
		b.mu.Unlock()
		var (
			wg sync.WaitGroup
			ok bool
		)
		wg.Add(2)
		go func() { defer wg.Done(); b.expire(a) }()
		go func() { defer wg.Done(); ok = b.keepUntil(a, time.Now().Add(time.Hour)) }()
		wg.Wait()
		a.mu.Lock()
		if ok {
			kept++
			if a.released {
				keptAndGivenUp++
			}
		}
		if a.timer != nil {
			a.timer.Stop()
		}
		a.mu.Unlock()
	}
	t.Logf("%d of %d races: the extend kept the acquisition", kept, rounds)
	if keptAndGivenUp > 0 {
		t.Errorf("%d of %d races: an extend was told the lease was kept and the expiry gave the acquisition up all the same", keptAndGivenUp, rounds)
	}
}
