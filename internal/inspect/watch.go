package inspect

import (
	"context"
	"fmt"
	"github.com/lockkit/lockkit/internal/policy"
	"sort"
	"time"

	"github.com/lockkit/lockkit/schema"
	"github.com/redis/go-redis/v9"
)

// DefaultInterval is Watch's default polling interval; MinInterval its least.
const (
	DefaultInterval = 100 * time.Millisecond
	MinInterval     = 10 * time.Millisecond
)

// Event kinds of Watch.
const (
	EventHeld     = "held"     // held when the watch started
	EventAcquired = "acquired" // taken while the key was free
	EventReleased = "released" // gone before its TTL ran out
	EventExpired  = "expired"  // gone when its TTL ran out
	EventHandover = "handover" // a FIFO lock went from one holder to the next between two polls
)

// Event is one holder change. JSON field names are stable.
type Event struct {
	Time   time.Time `json:"time"` // when the poll that saw it was read
	Event  string    `json:"event"`
	Domain string    `json:"domain"`
	Key    string    `json:"key"`
	// Token, Holder and Fence are the new holder's for held, acquired and
	// handover; the old holder's for released and expired.
	Token     string  `json:"token"`
	Holder    *Holder `json:"holder,omitempty"`
	Fence     *int64  `json:"fence"`
	TTLMillis int64   `json:"ttl_ms"` // the new holder's TTL; for released and expired the last seen
	// From is the previous holder of a handover.
	From *Prior `json:"from,omitempty"`
}

// Prior is the holder a handover took the lock from.
type Prior struct {
	Token  string  `json:"token"`
	Holder *Holder `json:"holder,omitempty"`
	Fence  *int64  `json:"fence"`
}

// WatchOptions select what Watch follows: one Key, or the locks Options
// selects (a domain and parameters, or every domain).
type WatchOptions struct {
	Options
	// Key, when set, is the one lock key to watch.
	Key string
	// Interval between polls; 0: DefaultInterval.
	Interval time.Duration
}

// Watch streams holder changes by polling: every Interval it reads the
// watched locks (one key: PTTL, GET, GET key:fence, ZCARD key:q in one
// pipeline; a domain: a full Inspect, SCAN included) and compares them with
// the previous poll. emit gets each event, in key order within a poll; Watch
// returns when emit returns false (nil), or when ctx ends (nil), or when
// Redis fails (the error). Changes between two polls that undo each other
// (a lock taken and released within one interval) are not seen; a poll cut
// short by the limit or the timeout reports no releases (the missing keys
// may just not have been scanned).
func (in *Inspector) Watch(ctx context.Context, rdb redis.UniversalClient, o WatchOptions, emit func(Event) bool) error {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Interval < MinInterval {
		return fmt.Errorf("interval %v is below %v", o.Interval, MinInterval)
	}
	var c *cand
	domains := map[string]*schema.Domain{}
	for _, d := range in.file.Domains {
		domains[d.Name] = d
	}
	if o.Key != "" {
		d, ps, ok := in.dec.Decode(o.Key)
		if !ok {
			_, err := in.Domain(o.Key)
			return err
		}
		c = &cand{o.Key, d, ps}
	} else if _, err := in.compile(o.Options); err != nil {
		return err
	}
	poll := func() (map[string]Lock, bool, error) {
		if c != nil {
			r := &run{in: in, o: o.Options}
			locks, _, err := r.fetch(ctx, rdb, "", []cand{*c})
			if err != nil {
				return nil, false, err
			}
			m := map[string]Lock{}
			for _, l := range locks {
				m[l.Key] = l
			}
			return m, true, nil
		}
		rep, err := in.Inspect(ctx, rdb, o.Options)
		if err != nil {
			return nil, false, err
		}
		m := map[string]Lock{}
		for _, l := range rep.Locks {
			m[l.Key] = l
		}
		return m, rep.Complete, nil
	}
	var prev map[string]Lock
	var prevAt time.Time
	for first := true; ; first = false {
		at := time.Now()
		cur, complete, err := poll()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var evs []Event
		ev := func(kind string, l Lock) Event {
			return Event{Time: at.UTC(), Event: kind, Domain: l.Domain, Key: l.Key, Token: l.Token, Holder: l.Holder, Fence: l.Fence, TTLMillis: l.TTLMillis}
		}
		gone := func(l Lock) Event {
			// Expired when its TTL, as last seen, ran out by now (with
			// half an interval's slack for the reads' own delays); a
			// release leaves earlier.
			if l.TTLMillis >= 0 && time.Duration(l.TTLMillis)*time.Millisecond <= at.Sub(prevAt)+o.Interval/2 {
				return ev(EventExpired, l)
			}
			return ev(EventReleased, l)
		}
		for k, l := range cur {
			p, had := prev[k]
			switch {
			case first:
				evs = append(evs, ev(EventHeld, l))
			case !had:
				evs = append(evs, ev(EventAcquired, l))
			case p.Token != l.Token:
				if d := domains[l.Domain]; d != nil && d.Wait == policy.WaitFIFOName {
					e := ev(EventHandover, l)
					e.From = &Prior{Token: p.Token, Holder: p.Holder, Fence: p.Fence}
					evs = append(evs, e)
				} else {
					evs = append(evs, gone(p), ev(EventAcquired, l))
				}
			}
		}
		if complete {
			for k, p := range prev {
				if _, ok := cur[k]; !ok {
					evs = append(evs, gone(p))
				}
			}
		} else {
			for k, p := range prev {
				if _, ok := cur[k]; !ok {
					cur[k] = p // not scanned this time: keep it
				}
			}
		}
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Key < evs[j].Key })
		for _, e := range evs {
			if !emit(e) {
				return nil
			}
		}
		prev, prevAt = cur, at
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(at.Add(o.Interval))):
		}
	}
}
