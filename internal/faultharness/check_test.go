package faultharness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The checker's own tests: each breaks one promise in otherwise clean
// records and histories, and the checker must name it. They need no server
// and run in milliseconds.

// cleanInput is two leases, A (fence 10) then B (fence 11), each writing
// once to both resources, B after A; then A, paused past its TTL, sends a
// late write to redis, which is fenced off.
func cleanInput() Input {
	grant := func(tok string, f int64, pos int) Grant { return Grant{Token: tok, Fence: f, Pos: pos} }
	va, vb := EncodeValue(0, 0, "A", 3), EncodeValue(1, 0, "B", 3)
	vaPG, vbPG := EncodeValue(0, 0, "A", 4), EncodeValue(1, 0, "B", 4)
	vaLate := EncodeValue(0, 0, "A", 5)
	h0 := []Event{
		{Ev: "grant", W: 0, T: 100, Tok: "A", Fence: 10},
		{Ev: "call", W: 0, T: 110, Op: 3, Kind: "write", Res: ResRedis, Tok: "A", Fence: 10, Value: va},
		{Ev: "ret", W: 0, T: 120, Op: 3, Kind: "write", Res: ResRedis, Out: "ok"},
		{Ev: "call", W: 0, T: 130, Op: 4, Kind: "write", Res: ResPG, Tok: "A", Fence: 10, Value: vaPG},
		{Ev: "ret", W: 0, T: 140, Op: 4, Kind: "write", Res: ResPG, Out: "ok"},
		{Ev: "selfstop", W: 0, T: 150, Res: ResRedis, Tok: "A", Fence: 10},
		{Ev: "call", W: 0, T: 400, Op: 5, Kind: "write", Res: ResRedis, Tok: "A", Fence: 10, Value: vaLate},
		{Ev: "ret", W: 0, T: 410, Op: 5, Kind: "write", Res: ResRedis, Out: "fenced", Cur: 11},
	}
	h1 := []Event{
		{Ev: "grant", W: 1, T: 200, Tok: "B", Fence: 11},
		{Ev: "call", W: 1, T: 205, Op: 2, Kind: "read", Res: ResRedis},
		{Ev: "ret", W: 1, T: 206, Op: 2, Kind: "read", Res: ResRedis, Out: "ok", Value: va, Fence: 10},
		{Ev: "call", W: 1, T: 210, Op: 3, Kind: "write", Res: ResRedis, Tok: "B", Fence: 11, Value: vb},
		{Ev: "ret", W: 1, T: 220, Op: 3, Kind: "write", Res: ResRedis, Out: "ok"},
		{Ev: "call", W: 1, T: 230, Op: 4, Kind: "write", Res: ResPG, Tok: "B", Fence: 11, Value: vbPG},
		{Ev: "ret", W: 1, T: 240, Op: 4, Kind: "write", Res: ResPG, Out: "ok"},
		{Ev: "call", W: 1, T: 500, Op: 5, Kind: "read", Res: ResRedis},
		{Ev: "ret", W: 1, T: 510, Op: 5, Kind: "read", Res: ResRedis, Out: "ok", Value: vb, Fence: 11},
	}
	return Input{
		Grants: [][]Grant{{grant("A", 10, 1)}, {grant("A", 10, 1), grant("B", 11, 6)}},
		Writes: map[string][]Write{
			ResRedis: {{Value: va, Fence: 10}, {Value: vb, Fence: 11}},
			ResPG:    {{Value: vaPG, Fence: 10}, {Value: vbPG, Fence: 11}},
		},
		Histories: [][]Event{h0, h1},
		Faults:    []Fault{{Kind: "pause-holder", Start: 150, End: 190, Worker: 0, Token: "A", Fence: 10, Res: ResRedis}},
	}
}

func TestCheckClean(t *testing.T) {
	r := Check(cleanInput())
	if len(r.Violations) != 0 {
		t.Fatalf("violations in clean records: %q", r.Violations)
	}
	if r.Grants != 2 || r.LateRejected != 1 || r.Accepted[ResRedis] != 2 || r.Rejected[ResRedis] != 1 {
		t.Fatalf("figures %+v", r)
	}
	for _, res := range []string{ResRedis, ResPG} {
		if got := CheckLinearizable(Operations(cleanInput().Histories, res), 0, ""); got != porcupine.Ok {
			t.Fatalf("%s: porcupine says %v for a clean history", res, got)
		}
	}
}

// Each case breaks the clean input one way; the checker must say so.
func TestCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Input)
		says   string
	}{
		{"a lagging replica re-issues a fence", func(in *Input) {
			in.Grants = append(in.Grants, []Grant{{Token: "C", Fence: 11, Epoch: 2}})
		}, "fence 11 granted to two leases"},
		{"fences go back after a restart", func(in *Input) {
			in.Grants = append(in.Grants, []Grant{{Token: "C", Fence: 9, Epoch: 2}})
		}, "fences must increase"},
		{"one lease, two fences", func(in *Input) {
			in.Grants[1][0].Fence = 12
		}, "was granted fence 10"},
		{"the resource accepts a lower fence", func(in *Input) {
			w := in.Writes[ResRedis]
			in.Writes[ResRedis] = append(w, Write{Value: EncodeValue(0, 0, "A", 5), Fence: 10})
		}, "after fence 11 was accepted"},
		{"a worker writes with fence-1", func(in *Input) {
			in.Writes[ResPG][1].Fence = 10
		}, "carries fence 10; its lease was granted fence 11"},
		{"two leases write with one fence", func(in *Input) {
			in.Grants = append(in.Grants, []Grant{{Token: "C", Fence: 12, Epoch: 2}})
			in.Writes[ResPG] = append(in.Writes[ResPG], Write{Value: EncodeValue(2, 0, "C", 1), Fence: 11})
		}, "wrote for two leases"},
		{"a write from a lease never granted", func(in *Input) {
			in.Writes[ResPG] = append(in.Writes[ResPG], Write{Value: EncodeValue(2, 0, "Z", 1), Fence: 99})
		}, "never granted"},
		{"the paused holder's late write lands after a newer lease's", func(in *Input) {
			in.Writes[ResRedis] = append(in.Writes[ResRedis], Write{Value: EncodeValue(0, 0, "A", 6), Fence: 10})
		}, "paused past its TTL (pause-holder), was accepted after a newer lease's"},
		{"the paused holder's late write lands", func(in *Input) {
			in.Writes[ResRedis] = append(in.Writes[ResRedis][:1], Write{Value: EncodeValue(0, 0, "A", 5), Fence: 10}, in.Writes[ResRedis][1])
		}, "between its validity check and the write, was accepted"},
		{"the paused holder's late write was accepted, says the worker", func(in *Input) {
			in.Histories[0][7].Out = "ok"
		}, "late write to redis returned \"ok\""},
		{"an acknowledged write is missing from the record", func(in *Input) {
			in.Writes[ResPG] = in.Writes[ResPG][:1]
		}, "holds it 0 times"},
		{"a worker claims a grant the server never made", func(in *Input) {
			in.Histories[1][0].Fence = 13
		}, "the lock server granted it 11"},
		{"an error with a bad fmt verb", func(in *Input) {
			in.Histories[0] = append(in.Histories[0], Event{Ev: "acqfail", Out: "canceled", Err: "stopped waiting after 1 attempt(s) in 346ms: %!w(<nil>)"})
		}, "error is malformed"},
		{"no grant after a fault", func(in *Input) {
			in.Faults[0].End = 1000
		}, "no lease was granted after it ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := cleanInput()
			tc.mutate(&in)
			r := Check(in)
			for _, v := range r.Violations {
				if strings.Contains(v, tc.says) {
					return
				}
			}
			t.Fatalf("the checker missed it: want a violation saying %q, got %q", tc.says, r.Violations)
		})
	}
}

// porcupine catches what a record-free view of the workers would show: a
// read of a value older than one already acknowledged, and an accepted
// write with a fence below the stored one.
func TestLinearizableCatches(t *testing.T) {
	stale := cleanInput()
	h1 := stale.Histories[1]
	h1[8].Value, h1[8].Fence = h1[2].Value, h1[2].Fence // read A's value after B's write returned
	if got := CheckLinearizable(Operations(stale.Histories, ResRedis), 0, ""); got != porcupine.Illegal {
		t.Fatalf("stale read: porcupine says %v, want Illegal", got)
	}
	lower := cleanInput()
	lower.Histories[0][7].Out = "ok" // A's late write (fence 10 < 11) accepted
	if got := CheckLinearizable(Operations(lower.Histories, ResRedis), 0, ""); got != porcupine.Illegal {
		t.Fatalf("accepted lower fence: porcupine says %v, want Illegal", got)
	}
	unknown := cleanInput()
	unknown.Histories[0] = unknown.Histories[0][:7] // A killed while its late write was in flight
	if got := CheckLinearizable(Operations(unknown.Histories, ResRedis), 0, ""); got != porcupine.Ok {
		t.Fatalf("unanswered write: porcupine says %v, want Ok", got)
	}
}

// The AOF readers, on files in the form Redis 7 writes them: a RESP base
// (aof-use-rdb-preamble no) and an incremental file of script effects, with
// a command torn by a kill at the end.
func TestAOFReaders(t *testing.T) {
	dir := t.TempDir()
	resp := func(cmds ...[]string) string {
		var b strings.Builder
		for _, c := range cmds {
			b.WriteString("*" + itoa(len(c)) + "\r\n")
			for _, a := range c {
				b.WriteString("$" + itoa(len(a)) + "\r\n" + a + "\r\n")
			}
		}
		return b.String()
	}
	lk, ck := "lock:{booking}", "lock:{booking}:fence"
	base := resp([]string{"SELECT", "0"}, []string{"SET", ck, "100"}, []string{"SET", lk, "OLD"}, []string{"PEXPIREAT", lk, "1"})
	incr := resp(
		[]string{"SELECT", "0"},
		[]string{"MULTI"}, []string{"SET", lk, "T1", "PXAT", "5"}, []string{"INCR", ck}, []string{"EXEC"},
		[]string{"HSET", "res:booking", "value", "w0.0/T1/3", "fence", "101"},
		[]string{"DEL", lk},
		[]string{"MULTI"}, []string{"SET", lk, "T2", "PXAT", "6"}, []string{"SET", ck, "500"}, []string{"EXEC"},
		[]string{"MULTI"}, []string{"SET", lk, "T3", "PXAT", "7"}, []string{"SET", ck, "600"}, []string{"INCR", ck}, []string{"EXEC"},
	) + "*3\r\n$3\r\nSET\r\n$4\r\nlock" // torn
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("appendonly.aof.manifest", "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n")
	write("appendonly.aof.1.base.aof", base)
	write("appendonly.aof.1.incr.aof", incr)
	cmds, err := ReadAOF(dir)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := GrantsFromAOF(cmds, lk, ck, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Grant{{Token: "T1", Fence: 101}, {Token: "T2", Fence: 500}, {Token: "T3", Fence: 601}}
	if len(gs) != len(want) {
		t.Fatalf("grants %+v, want %+v", gs, want)
	}
	for i := range want {
		if gs[i].Token != want[i].Token || gs[i].Fence != want[i].Fence {
			t.Fatalf("grant %d = %+v, want %+v", i, gs[i], want[i])
		}
	}
	ws, err := WritesFromAOF(cmds, "res:booking")
	if err != nil || len(ws) != 1 || ws[0].Fence != 101 || ValueToken(ws[0].Value) != "T1" {
		t.Fatalf("writes %+v, %v", ws, err)
	}
	// A change of the runtime's script that the checker cannot replay is
	// an error, not a silent misreading.
	if _, err := GrantsFromAOF([][]string{{"INCRBYFLOAT", ck, "1.5"}}, lk, ck, 0); err == nil {
		t.Fatal("an unknown command on the counter was accepted")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
