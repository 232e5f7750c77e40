package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
)

var (
	leadsRE   = regexp.MustCompile(`(?m)^(replica-\d)  leads term (\d+); IsLeader: true$`)
	killedRE  = regexp.MustCompile(`(?m)^(replica-\d)  killed`)
	tookRE    = regexp.MustCompile(`(?m)^(replica-\d)  took over`)
	observed  = regexp.MustCompile(`(?m)^observer  the leader is (replica-\d), term (\d+)$`)
	oneLeader = regexp.MustCompile(`(?m)at most 1 leader at a time$`)
)

// On the embedded default: one replica leads, is killed, and another takes
// over with a higher term; never two leaders at once.
func TestLeaderEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-leader", run)
	exampletest.CheckEmbeddedNotice(t, out)
	leads := leadsRE.FindAllStringSubmatch(out, -1)
	killed := killedRE.FindStringSubmatch(out)
	took := tookRE.FindStringSubmatch(out)
	if len(leads) != 2 || killed == nil || took == nil {
		t.Fatalf("want two terms, a kill and a takeover:\n%s", out)
	}
	if leads[0][1] != killed[1] || leads[1][1] != took[1] || took[1] == killed[1] {
		t.Fatalf("the killed replica must be the first leader, and another must take over:\n%s", out)
	}
	if a, b := num(t, leads[0][2]), num(t, leads[1][2]); b <= a {
		t.Fatalf("the second term %s is not above the first %s", leads[1][2], leads[0][2])
	}
	if o := observed.FindStringSubmatch(out); o == nil || o[1] != took[1] || o[2] != leads[1][2] {
		t.Fatalf("the observer must see the new leader and its term:\n%s", out)
	}
	if !oneLeader.MatchString(out) {
		t.Fatalf("two replicas led at once:\n%s", out)
	}
}

func num(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
