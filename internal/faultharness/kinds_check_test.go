package faultharness

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The new kinds' checks, on small records: each clean one passes, each
// broken one is named. No servers.

func TestCheckFIFO(t *testing.T) {
	const lock, q = "lock:{b}", "lock:{b}:q"
	multi := func(cmds ...[]string) [][]string {
		return append(append([][]string{{"MULTI"}}, cmds...), []string{"EXEC"})
	}
	cat := func(parts ...[][]string) [][]string {
		var out [][]string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// A holds; B then C queue; A releases and hands over to B (the head);
	// C's deadline passes and D's acquire prunes it, then D queues; B
	// releases to D.
	clean := cat(
		multi([]string{"SET", lock, "A", "PX", "1000"}, []string{"SET", lock + ":fence", "10"}),
		multi([]string{"ZADD", q, "100", "B"}, []string{"ZADD", lock + ":qd", "5000", "B"}),
		multi([]string{"ZADD", q, "101", "C"}),
		multi([]string{"DEL", lock}, []string{"SET", lock, "B", "PX", "1000"}, []string{"ZREM", q, "B"}, []string{"SET", lock + ":fence", "11"}),
		multi([]string{"ZREM", q, "C"}, []string{"ZADD", q, "102", "D"}),
		multi([]string{"DEL", lock}, []string{"SET", lock, "D;host", "PX", "1000"}, []string{"ZREM", q, "D"}, []string{"SET", lock + ":fence", "12"}),
	)
	r := CheckFIFO(clean, lock, q, 0)
	if len(r.Violations) != 0 || r.Grants != 3 || r.FromQueue != 2 || r.MaxQueue != 2 {
		t.Fatalf("clean queue: %+v", r)
	}
	// A release's script that prunes a dead head (C) before handing over to
	// the next (D).
	pruned := cat(clean[:18], // B holds, C queued
		multi([]string{"ZADD", q, "102", "D"}),
		multi([]string{"DEL", lock}, []string{"ZREM", q, "C"}, []string{"SET", lock, "D", "PX", "1000"}, []string{"ZREM", q, "D"}))
	if r := CheckFIFO(pruned, lock, q, 0); len(r.Violations) != 0 {
		t.Fatalf("a handover after a prune: %q", r.Violations)
	}
	for name, tc := range map[string]struct {
		cmds [][]string
		says string
	}{
		"a newcomer takes the lock over a queued waiter":   {cat(clean[:11], multi([]string{"DEL", lock}), multi([]string{"SET", lock, "Z", "PX", "1000"})), "while B, queued at 100, was at the head"},
		"the second waiter goes first":                     {cat(clean[:11], multi([]string{"DEL", lock}, []string{"SET", lock, "C", "PX", "1000"}, []string{"ZREM", q, "C"})), "the lock went to C (queued at 101)"},
		"a command on the queue the checker does not know": {cat(clean[:11], [][]string{{"ZINCRBY", q, "1", "B"}}), "unknown to the checker"},
	} {
		r := CheckFIFO(tc.cmds, lock, q, 0)
		if !strings.Contains(strings.Join(r.Violations, "\n"), tc.says) {
			t.Errorf("%s: violations %q, want one saying %q", name, r.Violations, tc.says)
		}
	}
}

// tokenlessInput: PostgreSQL's record names fences only.
func tokenlessInput() Input {
	va, vb := EncodeValue(0, 0, "A", 1), EncodeValue(1, 0, "B", 1)
	return Input{
		Tokenless: true,
		Grants:    [][]Grant{{{Fence: 10, Pos: 1}, {Fence: 20, Pos: 2}}},
		Writes:    map[string][]Write{ResPG: {{Value: va, Fence: 10}, {Value: vb, Fence: 20}}},
		Histories: [][]Event{
			{{Ev: "grant", Tok: "A", Fence: 10, T: 1}, {Ev: "call", Op: 1, Kind: "write", Res: ResPG, Tok: "A", Fence: 10, Value: va, T: 2}, {Ev: "ret", Op: 1, Kind: "write", Res: ResPG, Out: "ok", T: 3}, {Ev: "done", Tok: "A", Out: "ok", T: 4}},
			{{Ev: "grant", Tok: "B", Fence: 20, T: 5}, {Ev: "call", Op: 1, Kind: "write", Res: ResPG, Tok: "B", Fence: 20, Value: vb, T: 6}, {Ev: "ret", Op: 1, Kind: "write", Res: ResPG, Out: "ok", T: 7}, {Ev: "done", Tok: "B", Out: "ok", T: 8}},
		},
	}
}

func TestCheckKinds(t *testing.T) {
	if r := Check(tokenlessInput()); len(r.Violations) != 0 || r.Grants != 2 {
		t.Fatalf("clean tokenless records: %q, grants %d", r.Violations, r.Grants)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Input)
		says   string
	}{
		{"a fence granted twice", func(in *Input) { in.Grants[0][1].Fence = 10 }, "fence 10 granted twice"},
		{"a write with a fence never granted", func(in *Input) { in.Writes[ResPG][1].Fence = 19 }, "carries fence 19, which the lock server never granted"},
		{"two leases claim one fence", func(in *Input) { in.Histories[1][0].Fence = 10 }, "which lease A was granted too"},
		{"Do returned nil after a loss", func(in *Input) {
			in.Faults = []Fault{{Kind: "pg-terminate", Token: "A", Lost: true, Start: 2, End: 3}}
		}, "Do returned nil for lease A"},
		{"a rolled-back write applied", func(in *Input) { in.Histories[1][2].Out = "aborted" }, "was rolled back, yet the resource applied it"},
		{"a re-grant where none is allowed", func(in *Input) {
			in.Tokenless = false
			in.Grants = [][]Grant{{{Token: "A", Fence: 10}, {Token: "A", Fence: 20}}}
		}, "lease A was granted fence 10 (epoch 0) and fence 20"},
	} {
		in := tokenlessInput()
		tc.mutate(&in)
		r := Check(in)
		if !strings.Contains(strings.Join(r.Violations, "\n"), tc.says) {
			t.Errorf("%s: violations %q, want one saying %q", tc.name, r.Violations, tc.says)
		}
	}
	// Allowed: a FIFO token granted again, writing with its second fence; a
	// DoTx lease that rolled back claiming a fence the record lost.
	in := tokenlessInput()
	in.Tokenless, in.Regrants = false, true
	in.Grants = [][]Grant{{{Token: "A", Fence: 5}, {Token: "A", Fence: 10}, {Token: "B", Fence: 20}}}
	if r := Check(in); len(r.Violations) != 0 || r.Regrants != 1 {
		t.Errorf("a re-granted FIFO token: %q, regrants %d", r.Violations, r.Regrants)
	}
	in = tokenlessInput()
	in.TxGrants = true
	in.Histories = append(in.Histories, []Event{{Ev: "grant", Tok: "C", Fence: 30, T: 9}, {Ev: "done", Tok: "C", Out: "lost", T: 10}})
	if r := Check(in); len(r.Violations) != 0 {
		t.Errorf("a rolled-back DoTx grant: %q", r.Violations)
	}
	// porcupine: an aborted write changes nothing, whatever its fence.
	ops := Operations([][]Event{{
		{Ev: "call", Op: 1, Kind: "write", Res: ResPG, Fence: 30, Value: "x", T: 1}, {Ev: "ret", Op: 1, Kind: "write", Res: ResPG, Out: "aborted", T: 2},
		{Ev: "call", Op: 2, Kind: "read", Res: ResPG, T: 3}, {Ev: "ret", Op: 2, Kind: "read", Res: ResPG, Out: "ok", T: 4},
	}}, ResPG)
	if got := CheckLinearizable(ops, 0, ""); got != porcupine.Ok {
		t.Errorf("an aborted write then an empty read: porcupine says %v", got)
	}
}

// TestCheckPermits: a semaphore's resource record, one row per slot. Two
// permits at once pass; a third slot, or a stale write a row let through
// after a newer lease's, is three writers at once.
func TestCheckPermits(t *testing.T) {
	w := func(tok string, pos int) Write { return Write{Value: EncodeValue(0, 0, tok, int64(pos)), Pos: pos} }
	clean := map[string][]Write{
		"s0": {w("A", 1), w("A", 3), w("C", 5), w("C", 7)},
		"s1": {w("B", 2), w("B", 4), w("D", 6), w("D", 8)},
	}
	r := CheckPermits(clean, 2)
	if len(r.Violations) != 0 || r.MaxAtOnce != 2 || r.Leases != 4 || r.Writes != 8 {
		t.Fatalf("two permits, two at once: %+v", r)
	}
	if r := CheckPermits(clean, 1); len(r.Violations) != 2 {
		t.Errorf("the same record, one permit: %q, want the two runs of two writers named", r.Violations)
	}
	for name, tc := range map[string]struct {
		writes map[string][]Write
		says   string
	}{
		"a third slot": {map[string][]Write{
			"s0": {w("A", 1), w("A", 4)}, "s1": {w("B", 2), w("B", 5)}, "s2": {w("C", 3), w("C", 6)},
		}, "3 writers at once at the resource, over the semaphore's 2 permits, at write 3 (s2): A (s0, writes 1..4), B (s1, writes 2..5), C (s2, writes 3..6)"},
		"a stale write let through": {map[string][]Write{
			"s0": {w("A", 1), w("C", 3), w("A", 4)}, "s1": {w("B", 2), w("B", 5)},
		}, "3 writers at once at the resource, over the semaphore's 2 permits, at write 3 (s0)"},
	} {
		r := CheckPermits(tc.writes, 2)
		if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], tc.says) {
			t.Errorf("%s: violations %q, want one saying %q", name, r.Violations, tc.says)
		}
	}
}
