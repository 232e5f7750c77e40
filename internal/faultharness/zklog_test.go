package faultharness

import (
	"bytes"
	"encoding/binary"
	"hash/adler32"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// zkLogFile writes a FileTxnLog as a ZooKeeper 3.8 server does: the header,
// entries (checksum, length, bytes, 'B'), then preallocated zeros.
func zkLogFile(t *testing.T, dir, name string, txns []ZKTxn) {
	t.Helper()
	var f bytes.Buffer
	be := func(w *bytes.Buffer, v any) { _ = binary.Write(w, binary.BigEndian, v) }
	be(&f, int32(0x5a4b4c47))
	be(&f, int32(2))
	be(&f, int64(0))
	for _, tx := range txns {
		var b bytes.Buffer
		be(&b, tx.Session)
		be(&b, int32(1))
		be(&b, tx.Zxid)
		be(&b, int64(0))
		be(&b, tx.Type)
		if tx.Path != "" {
			be(&b, int32(len(tx.Path)))
			b.WriteString(tx.Path)
			be(&b, int32(-1)) // data, acl...: not read
		}
		be(&f, int64(adler32.Checksum(b.Bytes())))
		be(&f, int32(b.Len()))
		f.Write(b.Bytes())
		f.WriteByte('B')
	}
	f.Write(make([]byte, 64))
	d := filepath.Join(dir, "version-2")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, name), f.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestZKLogGrants: three members' logs, two of them partial and
// overlapping (one started late, one stopped early), are read as one
// history;
// a child that becomes the lowest is a grant (fence: its create zxid), when
// the holder deletes its node or its session closes; a child behind the
// holder, deleted before it became the lowest, is none.
func TestZKLogGrants(t *testing.T) {
	const p = "/lockkit/lock:%7Bbooking%7D"
	all := []ZKTxn{
		{Zxid: 0x100000001, Session: 1, Type: zkCreateContainer, Path: p},
		{Zxid: 0x100000002, Session: 1, Type: zkCreate, Path: p + "/A-0000000000"},
		{Zxid: 0x100000003, Session: 2, Type: zkCreate, Path: p + "/B-0000000001"},
		{Zxid: 0x100000004, Session: 2, Type: zkDelete, Path: p + "/B-0000000001"}, // a poller behind A
		{Zxid: 0x100000005, Session: 3, Type: zkCreate, Path: p + "/C-0000000002"},
		{Zxid: 0x100000006, Session: 1, Type: zkDelete, Path: p + "/A-0000000000"}, // A releases: C holds
		{Zxid: 0x100000007, Session: 4, Type: zkCreate, Path: "/other/D-0000000000"},
		{Zxid: 0x200000001, Session: 1, Type: zkCreate, Path: p + "/E-0000000003"},
		{Zxid: 0x200000002, Session: 3, Type: zkCloseSession}, // C's session expired: E holds
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	zkLogFile(t, dirs[0], "log.100000001", all[:7])
	zkLogFile(t, dirs[1], "log.100000004", all[3:])
	zkLogFile(t, dirs[2], "log.100000001", all[:5])
	zkLogFile(t, dirs[2], "log.100000006", all[5:])
	txns, uncommitted, err := ReadZKLogs(dirs...)
	if err != nil || uncommitted != 0 {
		t.Fatalf("%d left out as uncommitted, err %v", uncommitted, err)
	}
	if len(txns) != len(all) || !slices.IsSortedFunc(txns, func(a, b ZKTxn) int { return int(a.Zxid - b.Zxid) }) {
		t.Fatalf("read %d transactions (want %d, one per zxid, in order): %+v", len(txns), len(all), txns)
	}
	got := GrantsFromZKLog(txns, p)
	want := []Grant{{Token: "A", Fence: 0x100000002, Pos: 0}, {Token: "C", Fence: 0x100000005, Pos: 1}, {Token: "E", Fence: 0x200000001, Pos: 2}}
	if !slices.EqualFunc(got, want, func(a, b Grant) bool { return a.Token == b.Token && a.Fence == b.Fence && a.Pos == b.Pos }) {
		t.Fatalf("grants %+v, want %+v", got, want)
	}
	if _, _, err := ReadZKLogs(t.TempDir()); err != nil {
		t.Fatalf("no logs: %v", err)
	}
	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, "version-2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "version-2", "log.1"), []byte("not a log at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadZKLogs(bad); err == nil {
		t.Fatal("a file that is not a transaction log was read without an error")
	}
}

// TestZKLogUncommitted: a leader paused (or killed) after logging proposals
// its followers never got keeps them in its log when it rejoins by a
// snapshot (the new leader's "Unhandled scenario ... fall back to use
// snapshot": it truncates the old leader's log only while the proposals are
// within its own committed log). Those transactions never happened: only
// what a quorum of the members logged is the ensemble's record. Here the
// old leader (member 2) logged a create of P, which takes the sequence the
// new epoch gives C, and a delete of the holder A; read as the record, P
// would hold from then on and no later grant (C's, D's) be in it. Member 3
// is behind by the last transaction, which two members hold: it counts.
func TestZKLogUncommitted(t *testing.T) {
	const p = "/lockkit/lock:%7Bbooking%7D"
	committed1 := []ZKTxn{
		{Zxid: 0x100000001, Session: 1, Type: zkCreate, Path: p + "/A-0000000000"},
	}
	phantom := []ZKTxn{
		{Zxid: 0x100000002, Session: 2, Type: zkCreate, Path: p + "/P-0000000001"},
		{Zxid: 0x100000003, Session: 1, Type: zkDelete, Path: p + "/A-0000000000"},
	}
	epoch2 := []ZKTxn{
		{Zxid: 0x200000001, Session: 3, Type: zkCreate, Path: p + "/C-0000000001"},
		{Zxid: 0x200000002, Session: 1, Type: zkDelete, Path: p + "/A-0000000000"}, // C holds
		{Zxid: 0x200000003, Session: 1, Type: zkCreate, Path: p + "/D-0000000002"},
		{Zxid: 0x200000004, Session: 3, Type: zkDelete, Path: p + "/C-0000000001"}, // D holds
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	zkLogFile(t, dirs[0], "log.100000001", slices.Concat(committed1, epoch2))
	zkLogFile(t, dirs[1], "log.100000001", slices.Concat(committed1, phantom))
	zkLogFile(t, dirs[1], "log.200000003", epoch2[2:]) // after the snapshot at 0x200000002
	zkLogFile(t, dirs[2], "log.100000001", slices.Concat(committed1, epoch2[:3]))
	txns, left, err := ReadZKLogs(dirs...)
	if err != nil {
		t.Fatal(err)
	}
	if left != len(phantom) {
		t.Errorf("%d zxids left out as uncommitted, want %d", left, len(phantom))
	}
	for _, tx := range txns {
		if slices.Contains(phantom, tx) {
			t.Errorf("read %+v, which only the old leader logged", tx)
		}
	}
	if want := len(committed1) + len(epoch2); len(txns) != want {
		t.Errorf("read %d transactions, want %d (every one a quorum logged): %+v", len(txns), want, txns)
	}
	got := GrantsFromZKLog(txns, p)
	want := []Grant{{Token: "A", Fence: 0x100000001, Pos: 0}, {Token: "C", Fence: 0x200000001, Pos: 1}, {Token: "D", Fence: 0x200000003, Pos: 2}}
	if !slices.EqualFunc(got, want, func(a, b Grant) bool { return a.Token == b.Token && a.Fence == b.Fence && a.Pos == b.Pos }) {
		t.Fatalf("grants %+v, want %+v", got, want)
	}
}
