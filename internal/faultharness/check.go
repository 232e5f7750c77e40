package faultharness

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Fault is one fault the test injected, as the test (not a worker) saw it.
type Fault struct {
	Kind   string // pause-holder, stop-holder, kill-holder, pause-server, restart-empty, failover
	Start  int64  // Unix ns: fault begins
	End    int64  // Unix ns: fault over (resumed, restarted, promoted)
	Worker int    // the worker it hit, or -1
	// Token and Fence are the lease the worker held when it was paused or
	// killed, from the lock server ("" when it held none at that moment).
	Token string
	Fence int64
	// Res is the resource whose write a self-stopped holder was about to
	// send (pause-holder).
	Res string
	// Resume is how long after End the next lease was granted (set by Check).
	Resume time.Duration
	// Note says anything else the test measured (e.g. the grants a lagging
	// replica missed).
	Note string
}

// Input is everything the checker reads.
type Input struct {
	// Grants are the lock server's grants, one slice per AOF directory, in
	// the order the directories served as primary.
	Grants [][]Grant
	// Writes are each resource's applied writes, from its own record.
	Writes map[string][]Write
	// Histories are the workers' histories, one per worker incarnation.
	Histories [][]Event
	Faults    []Fault
	// ResumeBound is how soon after a fault ends a lease must be granted.
	ResumeBound time.Duration
}

// Report is the checker's verdict and figures.
type Report struct {
	Violations []string

	Grants          int // distinct grants in the lock server's records
	GrantsSeen      int // grants the workers reported
	GrantsUnclaimed int // in the record, not reported by a worker (reply lost, or too late)
	AcqFailures     map[string]int
	Accepted        map[string]int // per resource, from its record
	Rejected        map[string]int // per resource, as the workers saw them (ErrFenced)
	WriteErrors     map[string]int
	LateRejected    int // writes sent after the lease's validity was checked and a pause: rejected
	Skipped         int // writes not sent: the lease was found lost right before
	LeasesLost      int // Do returned ErrLockLost
	Faults          []Fault
	MaxResume       time.Duration
}

// Check runs every check over in and returns the report. Violations empty
// means the lock's promises held.
func Check(in Input) *Report {
	r := &Report{
		AcqFailures: map[string]int{},
		Accepted:    map[string]int{},
		Rejected:    map[string]int{},
		WriteErrors: map[string]int{},
	}
	bad := func(format string, args ...any) {
		if len(r.Violations) < 100000 {
			r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
		}
	}
	byToken := checkGrants(in.Grants, r, bad)
	for _, res := range []string{ResRedis, ResPG} {
		checkResource(res, in.Writes[res], byToken, in.Faults, r, bad)
	}
	checkClaims(in, byToken, r, bad)
	checkFaults(in, r, bad)
	return r
}

// checkGrants: no fence granted to two leases, no lease granted two fences,
// and fences strictly increasing in the order the servers granted them,
// across restarts and failovers. A grant already seen in an earlier
// directory (a replica's copy) is the same grant, not a new one.
func checkGrants(epochs [][]Grant, r *Report, bad func(string, ...any)) map[string]Grant {
	byToken := map[string]Grant{}
	byFence := map[int64]Grant{}
	var highest int64
	var highestAt Grant
	for _, gs := range epochs {
		for _, g := range gs {
			if prev, ok := byToken[g.Token]; ok {
				if prev.Fence != g.Fence {
					bad("lease %s was granted fence %d (epoch %d) and fence %d (epoch %d)", g.Token, prev.Fence, prev.Epoch, g.Fence, g.Epoch)
				}
				continue // a replica's copy of a grant seen before
			}
			if prev, ok := byFence[g.Fence]; ok {
				bad("fence %d granted to two leases: %s (epoch %d, command %d) and %s (epoch %d, command %d)",
					g.Fence, prev.Token, prev.Epoch, prev.Pos, g.Token, g.Epoch, g.Pos)
			} else if g.Fence <= highest {
				bad("fence %d (lease %s, epoch %d) granted after fence %d (lease %s, epoch %d): fences must increase",
					g.Fence, g.Token, g.Epoch, highest, highestAt.Token, highestAt.Epoch)
			}
			if g.Fence > highest {
				highest, highestAt = g.Fence, g
			}
			byToken[g.Token] = g
			byFence[g.Fence] = g
		}
	}
	r.Grants = len(byToken)
	return byToken
}

// checkResource reads one resource's record: accepted writes have
// non-decreasing fences in the resource's order; every accepted write
// carries the fence its lease was granted; no two leases wrote with one
// fence; a paused holder's late write is not there.
func checkResource(res string, writes []Write, byToken map[string]Grant, faults []Fault, r *Report, bad func(string, ...any)) {
	r.Accepted[res] = len(writes)
	var highest int64
	fenceOwner := map[int64]string{}
	for i, w := range writes {
		tok := ValueToken(w.Value)
		if w.Fence < highest {
			bad("%s: accepted write %d (%q) has fence %d after fence %d was accepted", res, i, w.Value, w.Fence, highest)
		}
		highest = max(highest, w.Fence)
		g, ok := byToken[tok]
		switch {
		case tok == "":
			bad("%s: accepted write %d (%q) is not a worker's", res, i, w.Value)
		case !ok:
			bad("%s: accepted write %d (%q) is from lease %s, which the lock server never granted", res, i, w.Value, tok)
		case g.Fence != w.Fence:
			bad("%s: accepted write %d (%q) carries fence %d; its lease was granted fence %d", res, i, w.Value, w.Fence, g.Fence)
		}
		if o, ok := fenceOwner[w.Fence]; ok && o != tok {
			bad("%s: fence %d wrote for two leases: %s and %s (write %d)", res, w.Fence, o, tok, i)
		}
		fenceOwner[w.Fence] = tok
	}
	for _, f := range faults {
		if f.Token == "" || (f.Kind != "pause-holder" && f.Kind != "stop-holder") {
			continue
		}
		// The holder was paused past its TTL, and resumed only once a newer
		// lease had written to both resources: none of its writes may land
		// after a newer lease's.
		newer := false
		for i, w := range writes {
			tok := ValueToken(w.Value)
			if tok != f.Token && w.Fence > f.Fence {
				newer = true
			}
			if tok == f.Token && newer {
				bad("%s: write %d (%q) of lease %s, paused past its TTL (%s), was accepted after a newer lease's", res, i, w.Value, f.Token, f.Kind)
			}
		}
	}
}

// checkClaims joins the workers' histories to the records: every grant a
// worker saw is in the lock server's record with that fence; every write a
// worker saw accepted is in the resource's record once, every write it saw
// rejected is not.
func checkClaims(in Input, byToken map[string]Grant, r *Report, bad func(string, ...any)) {
	applied := map[string]map[string]int{}
	for res, ws := range in.Writes {
		applied[res] = map[string]int{}
		for _, w := range ws {
			applied[res][w.Value]++
		}
	}
	seen := map[string]bool{}
	for _, h := range in.Histories {
		calls := map[int64]Event{}
		for _, e := range h {
			switch e.Ev {
			case "grant":
				r.GrantsSeen++
				seen[e.Tok] = true
				if g, ok := byToken[e.Tok]; !ok {
					bad("worker %d.%d: granted lease %s (fence %d), which the lock server's record does not hold", e.W, e.Inc, e.Tok, e.Fence)
				} else if g.Fence != e.Fence {
					bad("worker %d.%d: lease %s has fence %d; the lock server granted it %d", e.W, e.Inc, e.Tok, e.Fence, g.Fence)
				}
			case "acqfail":
				r.AcqFailures[e.Out]++
			case "skip":
				r.Skipped++
			case "done":
				if e.Out == "lost" {
					r.LeasesLost++
				}
			case "call":
				calls[e.Op] = e
			case "ret":
				c, ok := calls[e.Op]
				if !ok || c.Kind != "write" {
					continue
				}
				n := applied[c.Res][c.Value]
				switch e.Out {
				case "ok":
					if n != 1 {
						bad("worker %d.%d: write %q to %s was acknowledged, and the resource's record holds it %d times", e.W, e.Inc, c.Value, c.Res, n)
					}
				case "fenced":
					r.Rejected[c.Res]++
					if n != 0 {
						bad("worker %d.%d: write %q to %s was reported fenced off, yet the resource applied it", e.W, e.Inc, c.Value, c.Res)
					}
				default:
					r.WriteErrors[c.Res]++
				}
			}
		}
	}
	r.GrantsUnclaimed = r.Grants - len(seen)
}

// checkFaults: each fault was followed by a grant within the bound, and each
// self-stopped holder's late write was sent and turned away.
func checkFaults(in Input, r *Report, bad func(string, ...any)) {
	var grants []int64
	type late struct{ value, out string }
	lateWrites := map[string]late{} // token+res -> the write sent after selfstop
	applied := map[string]bool{}
	for res, ws := range in.Writes {
		for _, w := range ws {
			applied[res+"\x00"+w.Value] = true
		}
	}
	for _, h := range in.Histories {
		stopped := map[string]bool{}
		calls := map[int64]Event{}
		for _, e := range h {
			switch e.Ev {
			case "grant":
				grants = append(grants, e.T)
			case "selfstop":
				stopped[e.Tok+"/"+e.Res] = true
			case "call":
				calls[e.Op] = e
			case "ret":
				if c := calls[e.Op]; c.Kind == "write" && stopped[c.Tok+"/"+c.Res] {
					lateWrites[c.Tok+"/"+c.Res] = late{c.Value, e.Out}
				}
			}
		}
	}
	slices.Sort(grants)
	for i := range in.Faults {
		f := &in.Faults[i]
		j := sort.Search(len(grants), func(k int) bool { return grants[k] > f.End })
		if j == len(grants) {
			bad("%s at %s: no lease was granted after it ended", f.Kind, time.Unix(0, f.Start).UTC().Format("15:04:05.000"))
			continue
		}
		f.Resume = time.Duration(grants[j] - f.End)
		r.MaxResume = max(r.MaxResume, f.Resume)
		if in.ResumeBound > 0 && f.Resume > in.ResumeBound {
			bad("%s: the next lease came %v after the fault ended; the bound is %v", f.Kind, f.Resume, in.ResumeBound)
		}
		if f.Kind == "pause-holder" && f.Token != "" {
			lw := lateWrites[f.Token+"/"+f.Res]
			switch lw.out {
			case "fenced":
				r.LateRejected++
			case "":
				bad("pause-holder: lease %s's late write to %s was never answered", f.Token, f.Res)
			default:
				bad("pause-holder: lease %s's late write to %s returned %q, want fenced", f.Token, f.Res, lw.out)
			}
			if lw.value != "" && applied[f.Res+"\x00"+lw.value] {
				bad("%s: the late write %q of lease %s, paused past its TTL between its validity check and the write, was accepted", f.Res, lw.value, f.Token)
			}
		}
	}
	r.Faults = in.Faults
}
