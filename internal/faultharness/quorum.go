package faultharness

import (
	"fmt"
	"time"
)

// QuorumLoss is an outage of a consensus lock server's quorum (etcd: two
// of three members down), as the test saw it on the member left running.
type QuorumLoss struct {
	// From and To (Unix ns) bound the time no entry could commit: From is
	// when RevLost was read, after the majority was down; To is when RevBack
	// was read, before the first member was started again.
	From, To int64
	// RevLost and RevBack are the running member's store revision at From
	// and at To: every grant committed before the loss has a fence (its
	// create revision) of at most RevLost.
	RevLost, RevBack int64
}

// QuorumReport is CheckQuorumLoss's verdict and figures.
type QuorumReport struct {
	Violations []string
	// Failed counts the acquisitions that ended without a lease during the
	// outage, by outcome; EarlierGrants the grants workers reported during
	// it that the record dates before it (replies of earlier commits).
	Failed        map[string]int
	EarlierGrants int
}

// CheckQuorumLoss checks that no lease was granted while quorum was lost:
// the running member's revision did not move, the record of grants (fences
// are create revisions) holds none committed in the outage, and every grant
// a worker reported during it is one the record dates before the loss.
func CheckQuorumLoss(q QuorumLoss, grants [][]Grant, hists [][]Event) QuorumReport {
	rep := QuorumReport{Failed: map[string]int{}}
	bad := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	at := func(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
	if q.RevBack != q.RevLost {
		bad("quorum loss %s–%s: the running member's revision moved from %d to %d while quorum was lost", at(q.From), at(q.To), q.RevLost, q.RevBack)
	}
	for _, gs := range grants {
		for _, g := range gs {
			if g.Fence > q.RevLost && g.Fence <= q.RevBack {
				bad("quorum loss %s–%s: lease %s was granted fence %d, committed while quorum was lost (revision %d at the loss)", at(q.From), at(q.To), g.Token, g.Fence, q.RevLost)
			}
		}
	}
	for _, h := range hists {
		for _, e := range h {
			if e.T < q.From || e.T > q.To {
				continue
			}
			switch e.Ev {
			case "grant":
				if e.Fence > q.RevLost {
					bad("quorum loss %s–%s: worker %d.%d was granted lease %s with fence %d at %s, above the revision %d at the loss: granted without quorum", at(q.From), at(q.To), e.W, e.Inc, e.Tok, e.Fence, at(e.T), q.RevLost)
				} else {
					rep.EarlierGrants++
				}
			case "acqfail":
				rep.Failed[e.Out]++
			}
		}
	}
	return rep
}
