package faultharness

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lockkit/lockkit/internal/errcheck"
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
	// Lost: the test made sure Token's lease was lost while its worker was
	// inside fn (stopped there past its TTL, its session ended, its node
	// restarted empty): Do must not have returned nil for it.
	Lost bool
}

// Input is everything the checker reads.
type Input struct {
	// Grants are the lock server's grants, one slice per AOF directory, in
	// the order the directories served as primary.
	Grants [][]Grant
	// GrantSets are the grants of further locks (DoAll's keys), by lock
	// key, each like Grants; fences are per lock.
	GrantSets map[string][][]Grant
	// Tokenless: the grant records name fences, not lease tokens
	// (PostgreSQL's fence log): writes and claims join them by fence.
	Tokenless bool
	// LateOutcomes are the answers that turn a paused holder's late write
	// away; nil means fenced only. (DoTx: its transaction also rolls back.)
	LateOutcomes []string
	// Regrants: a token may be granted again with a new fence (FIFO: a
	// release hands the lock to a queued token, the handover runs out
	// before the waiter learns of it, and the waiter's next attempt takes
	// the lock anew with the same token). Its lease has one of those fences.
	Regrants bool
	// TxGrants: a grant rolls back with its transaction (DoTx), and its
	// fence leaves the record: a lease whose DoTx did not commit may claim
	// a fence the record does not hold, or one issued again later.
	TxGrants bool
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
	LateRejected    int            // writes sent after the lease's validity was checked and a pause: rejected
	Skipped         int            // writes not sent: the lease was found lost right before
	LeasesLost      int            // Do returned ErrLockLost
	Aborted         map[string]int // per resource: writes whose transaction rolled back
	LostChecked     int            // leases the test made sure were lost in fn: Do did not return nil
	Regrants        int            // tokens granted again with a new fence (Input.Regrants)
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
		Aborted:     map[string]int{},
	}
	bad := func(format string, args ...any) {
		if len(r.Violations) < 100000 {
			r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
		}
	}
	byToken, byFence := checkGrants(in.Grants, in.Regrants, r, bad)
	for _, key := range slices.Sorted(maps.Keys(in.GrantSets)) {
		n := r.Grants
		bt, _ := checkGrants(in.GrantSets[key], in.Regrants, r, func(format string, args ...any) { bad(key+": "+format, args...) })
		r.Grants += n
		for tok, g := range bt {
			if prev, ok := byToken[tok]; ok {
				bad("lease %s was granted on two locks (fences %d and %d)", tok, prev.Fence, g.Fence)
			}
			byToken[tok] = g
		}
	}
	if !in.Tokenless {
		byFence = nil
	}
	for _, res := range slices.Sorted(maps.Keys(in.Writes)) {
		checkResource(res, in.Writes[res], byToken, byFence, in.Faults, r, bad)
	}
	checkClaims(in, byToken, r, bad)
	checkFaults(in, r, bad)
	checkErrorText(in.Histories, bad)
	return r
}

// checkErrorText: no error a worker saw is malformed. "%!" is what fmt
// writes for a verb with a bad or missing argument (issue 30 found
// "%!w(<nil>)" in a FIFO wait's error). The harness's workers record
// their errors; every other test on a real server has lockkit's errors
// checked where they leave it (internal/errcheck).
func checkErrorText(hists [][]Event, bad func(string, ...any)) {
	for w, h := range hists {
		for _, e := range h {
			if errcheck.Faulty(e.Err) {
				bad("worker history %d: a %s event's error is malformed (a fmt verb with a bad argument): %q", w, e.Ev, e.Err)
			}
		}
	}
}

// checkGrants: no fence granted to two leases, no lease granted two fences,
// and fences strictly increasing in the order the servers granted them,
// across restarts and failovers. A grant already seen in an earlier
// directory (a replica's copy) is the same grant, not a new one.
//
// A tokenless record (Grant.Token "") is checked by fence alone.
func checkGrants(epochs [][]Grant, regrants bool, r *Report, bad func(string, ...any)) (map[string]Grant, map[int64]Grant) {
	byToken := map[string]Grant{}
	byFence := map[int64]Grant{}
	var highest int64
	var highestAt Grant
	tokenless := 0
	for _, gs := range epochs {
		for _, g := range gs {
			if g.Token == "" {
				if _, ok := byFence[g.Fence]; ok {
					bad("fence %d granted twice (epoch %d, record %d)", g.Fence, g.Epoch, g.Pos)
				} else if g.Fence <= highest {
					bad("fence %d (epoch %d, record %d) granted after fence %d: fences must increase", g.Fence, g.Epoch, g.Pos, highest)
				}
				highest = max(highest, g.Fence)
				byFence[g.Fence] = g
				tokenless++
				continue
			}
			regrant := false
			if prev, ok := byToken[g.Token]; ok {
				if prev.Fence != g.Fence && regrants && !slices.Contains(prev.Earlier, g.Fence) {
					g.Earlier = append(slices.Clone(prev.Earlier), prev.Fence)
					r.Regrants++
					regrant = true
				} else if prev.Fence != g.Fence && !slices.Contains(prev.Earlier, g.Fence) {
					bad("lease %s was granted fence %d (epoch %d) and fence %d (epoch %d)", g.Token, prev.Fence, prev.Epoch, g.Fence, g.Epoch)
				}
				if !regrant {
					continue // a replica's copy of a grant seen before
				}
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
	r.Grants = len(byToken) + tokenless
	return byToken, byFence
}

// checkResource reads one resource's record: accepted writes have
// non-decreasing fences in the resource's order; every accepted write
// carries the fence its lease was granted; no two leases wrote with one
// fence; a paused holder's late write is not there.
//
// With byFence (a tokenless grant record), a write's fence must be one the
// record holds; which lease it went to, the record cannot say.
func checkResource(res string, writes []Write, byToken map[string]Grant, byFence map[int64]Grant, faults []Fault, r *Report, bad func(string, ...any)) {
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
		_, granted := byFence[w.Fence]
		switch {
		case tok == "":
			bad("%s: accepted write %d (%q) is not a worker's", res, i, w.Value)
		case byFence != nil:
			if !granted {
				bad("%s: accepted write %d (%q) carries fence %d, which the lock server never granted", res, i, w.Value, w.Fence)
			}
		case !ok:
			bad("%s: accepted write %d (%q) is from lease %s, which the lock server never granted", res, i, w.Value, tok)
		case g.Fence != w.Fence && !slices.Contains(g.Earlier, w.Fence):
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
	doneOut := doneOutcomes(in.Histories)
	seen := map[string]bool{}
	claimed := map[int64]string{} // tokenless: fence -> the token that claimed it
	for _, h := range in.Histories {
		calls := map[int64]Event{}
		for _, e := range h {
			switch e.Ev {
			case "grant":
				r.GrantsSeen++
				seen[e.Tok] = true
				if in.Tokenless {
					if in.TxGrants && doneOut[e.Tok] != "ok" {
						break // rolled back: its fence left the record, and may come again
					}
					if !fenceGranted(in.Grants, e.Fence) {
						bad("worker %d.%d: granted lease %s with fence %d, which the lock server's record does not hold", e.W, e.Inc, e.Tok, e.Fence)
					}
					if o, ok := claimed[e.Fence]; ok && o != e.Tok {
						bad("worker %d.%d: lease %s has fence %d, which lease %s was granted too", e.W, e.Inc, e.Tok, e.Fence, o)
					}
					claimed[e.Fence] = e.Tok
				} else if g, ok := byToken[e.Tok]; !ok {
					bad("worker %d.%d: granted lease %s (fence %d), which the lock server's record does not hold", e.W, e.Inc, e.Tok, e.Fence)
				} else if g.Fence != e.Fence && !slices.Contains(g.Earlier, e.Fence) {
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
				case "aborted":
					r.Aborted[c.Res]++
					if n != 0 {
						bad("worker %d.%d: write %q to %s was rolled back, yet the resource applied it", e.W, e.Inc, c.Value, c.Res)
					}
				default:
					r.WriteErrors[c.Res]++
				}
			}
		}
	}
	r.GrantsUnclaimed = r.Grants - len(seen)
}

// doneOutcomes is how each lease's Do (DoTx, DoAll) ended, by token.
func doneOutcomes(hists [][]Event) map[string]string {
	out := map[string]string{}
	for _, h := range hists {
		for _, e := range h {
			if e.Ev == "done" || e.Ev == "setdone" {
				out[e.Tok] = e.Out
			}
		}
	}
	return out
}

func fenceGranted(epochs [][]Grant, f int64) bool {
	for _, gs := range epochs {
		for _, g := range gs {
			if g.Fence == f {
				return true
			}
		}
	}
	return false
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
	doneOut := doneOutcomes(in.Histories)
	lateOK := in.LateOutcomes
	if lateOK == nil {
		lateOK = []string{"fenced"}
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
		if f.Lost && f.Token != "" {
			switch out, ok := doneOut[f.Token]; {
			case out == "ok":
				bad("%s: Do returned nil for lease %s, which was lost while its worker was inside fn", f.Kind, f.Token)
			case ok:
				r.LostChecked++
			}
		}
		if f.Kind == "pause-holder" && f.Token != "" {
			lw := lateWrites[f.Token+"/"+f.Res]
			switch {
			case slices.Contains(lateOK, lw.out):
				r.LateRejected++
			case lw.out == "":
				bad("pause-holder: lease %s's late write to %s was never answered", f.Token, f.Res)
			default:
				bad("pause-holder: lease %s's late write to %s returned %q, want %s", f.Token, f.Res, lw.out, strings.Join(lateOK, " or "))
			}
			if lw.value != "" && applied[f.Res+"\x00"+lw.value] {
				bad("%s: the late write %q of lease %s, paused past its TTL between its validity check and the write, was accepted", f.Res, lw.value, f.Token)
			}
		}
	}
	r.Faults = in.Faults
}
