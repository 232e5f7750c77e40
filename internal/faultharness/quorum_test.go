package faultharness

import (
	"strings"
	"testing"
)

// CheckQuorumLoss on small records: a clean outage passes, each grant
// without quorum is named. No servers.
func TestCheckQuorumLoss(t *testing.T) {
	q := QuorumLoss{From: 100, To: 200, RevLost: 50, RevBack: 50}
	grants := [][]Grant{{{Token: "A", Fence: 40}, {Token: "B", Fence: 50}, {Token: "C", Fence: 60}}}
	hists := [][]Event{
		// B's grant committed at 50, before the loss; its reply came in it.
		{{Ev: "grant", Tok: "B", Fence: 50, T: 110}, {Ev: "acqfail", Out: "unavailable", T: 150}},
		{{Ev: "acqfail", Out: "unavailable", T: 120}, {Ev: "grant", Tok: "C", Fence: 60, T: 250}},
	}
	r := CheckQuorumLoss(q, grants, hists)
	if len(r.Violations) != 0 || r.EarlierGrants != 1 || r.Failed["unavailable"] != 2 {
		t.Fatalf("clean outage: %+v", r)
	}
	for name, tc := range map[string]struct {
		q     QuorumLoss
		hists [][]Event
		says  []string
	}{
		"the running member applied an entry in the outage": {
			q: QuorumLoss{From: 100, To: 200, RevLost: 50, RevBack: 60}, hists: hists,
			says: []string{"revision moved from 50 to 60", "lease C was granted fence 60, committed while quorum was lost"},
		},
		"a worker granted in the outage a fence above the loss's revision": {
			q:     q,
			hists: [][]Event{{{Ev: "grant", W: 1, Tok: "C", Fence: 60, T: 150}}},
			says:  []string{"worker 1.0 was granted lease C with fence 60", "granted without quorum"},
		},
	} {
		r := CheckQuorumLoss(tc.q, grants, tc.hists)
		all := strings.Join(r.Violations, "\n")
		for _, s := range tc.says {
			if !strings.Contains(all, s) {
				t.Errorf("%s: violations %q, want one saying %q", name, r.Violations, s)
			}
		}
	}
}
