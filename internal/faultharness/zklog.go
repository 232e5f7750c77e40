package faultharness

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ZKTxn is one transaction of a ZooKeeper server's transaction log (the
// files version-2/log.* of its dataDir): the operations the harness needs.
type ZKTxn struct {
	Zxid    int64
	Session int64 // the session that made it (an ephemeral node's owner)
	Type    int32 // ZooKeeper's OpCode: 1 create, 2 delete, -11 closeSession, ...
	Path    string
}

// ZooKeeper's OpCodes (org.apache.zookeeper.ZooDefs.OpCode) that the replay
// reads.
const (
	zkCreate          = 1
	zkDelete          = 2
	zkMulti           = 14
	zkCreate2         = 15
	zkCreateContainer = 19
	zkDeleteContainer = 20
	zkCreateTTL       = 21
	zkCloseSession    = -11
)

// ReadZKLogs reads the transaction logs of every member of one ensemble
// (their dataDirs, all of them) and returns the transactions a quorum of
// them logged, one per zxid (a multi's parts share theirs), in zxid order,
// and how many zxids fewer members logged (left out).
//
// A member's log can hold proposals that were never committed: a leader
// logs its proposals as it sends them, so one paused or killed before a
// follower logged them keeps them. When it rejoins, the new leader
// truncates its log (TRUNC) only while those zxids are within the new
// leader's committed log; once the new epoch has committed more, it sends a
// snapshot instead (its log: "Unhandled scenario for peer sid: N fall back
// to use snapshot"), and the old log file keeps them. Zab commits a
// proposal once a quorum has logged it, and no member's log loses a
// committed transaction, so what a quorum logged is exactly what the
// ensemble committed; a member behind the others is outvoted, not read as
// a gap.
func ReadZKLogs(dataDirs ...string) (txns []ZKTxn, uncommitted int, err error) {
	type logged struct {
		parts   []ZKTxn
		members int
	}
	byZxid := map[int64]*logged{}
	for _, d := range dataDirs {
		files, err := filepath.Glob(filepath.Join(d, "version-2", "log.*"))
		if err != nil {
			return nil, 0, err
		}
		mine := map[int64][]ZKTxn{} // this member's, by zxid
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, 0, err
			}
			logged, err := parseZKLog(b)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", f, err)
			}
			inFile := map[int64][]ZKTxn{}
			for _, tx := range logged {
				inFile[tx.Zxid] = append(inFile[tx.Zxid], tx)
			}
			maps.Copy(mine, inFile)
		}
		for z, parts := range mine {
			if l, ok := byZxid[z]; ok {
				l.members++
			} else {
				byZxid[z] = &logged{parts: parts, members: 1}
			}
		}
	}
	quorum := len(dataDirs)/2 + 1
	zxids := make([]int64, 0, len(byZxid))
	for z, l := range byZxid {
		if l.members < quorum {
			uncommitted++
			continue
		}
		zxids = append(zxids, z)
	}
	slices.Sort(zxids)
	for _, z := range zxids {
		txns = append(txns, byZxid[z].parts...)
	}
	return txns, uncommitted, nil
}

// parseZKLog reads one log file (FileTxnLog): a header (magic "ZKLG",
// version, dbid), then entries of a checksum (Adler-32 of the bytes), the
// length, the transaction's bytes and an end-of-record byte 'B'. The file
// is preallocated with zeros: a zero length ends it, as does an entry cut
// short or whose checksum does not match (the last one being written).
func parseZKLog(b []byte) ([]ZKTxn, error) {
	r := bytes.NewReader(b)
	var hdr struct {
		Magic, Version int32
		DBID           int64
	}
	if err := binary.Read(r, binary.BigEndian, &hdr); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if hdr.Magic != 0x5a4b4c47 { // "ZKLG"
		return nil, fmt.Errorf("not a ZooKeeper transaction log (magic %#x)", hdr.Magic)
	}
	var out []ZKTxn
	for {
		var crc int64
		var n int32
		if binary.Read(r, binary.BigEndian, &crc) != nil || binary.Read(r, binary.BigEndian, &n) != nil || n <= 0 || int(n) > r.Len() {
			return out, nil
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return out, nil
		}
		if eor, err := r.ReadByte(); err != nil || eor != 'B' || uint32(crc) != adler32.Checksum(buf) {
			return out, nil
		}
		txns, err := parseZKTxn(buf)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", len(out), err)
		}
		out = append(out, txns...)
	}
}

// parseZKTxn reads a TxnHeader (clientId, cxid, zxid, time, type) and the
// path of a create or delete; a multi's parts become transactions of their
// own, with the multi's zxid and session.
func parseZKTxn(b []byte) ([]ZKTxn, error) {
	r := bytes.NewReader(b)
	var h struct {
		Session int64
		Cxid    int32
		Zxid    int64
		Time    int64
		Type    int32
	}
	if err := binary.Read(r, binary.BigEndian, &h); err != nil {
		return nil, err
	}
	tx := ZKTxn{Zxid: h.Zxid, Session: h.Session, Type: h.Type}
	switch h.Type {
	case zkCreate, zkCreate2, zkCreateContainer, zkCreateTTL, zkDelete, zkDeleteContainer:
		p, err := readZKString(r)
		if err != nil {
			return nil, err
		}
		tx.Path = p
	case zkMulti:
		var count int32
		if err := binary.Read(r, binary.BigEndian, &count); err != nil {
			return nil, err
		}
		var out []ZKTxn
		for range max(count, 0) {
			var typ, n int32
			if err := binary.Read(r, binary.BigEndian, &typ); err != nil {
				return nil, err
			}
			if err := binary.Read(r, binary.BigEndian, &n); err != nil {
				return nil, err
			}
			part := make([]byte, max(n, 0))
			if _, err := io.ReadFull(r, part); err != nil {
				return nil, err
			}
			sub := ZKTxn{Zxid: h.Zxid, Session: h.Session, Type: typ}
			switch typ {
			case zkCreate, zkCreate2, zkCreateContainer, zkCreateTTL, zkDelete, zkDeleteContainer:
				p, err := readZKString(bytes.NewReader(part))
				if err != nil {
					return nil, err
				}
				sub.Path = p
			}
			out = append(out, sub)
		}
		return out, nil
	}
	return []ZKTxn{tx}, nil
}

func readZKString(r *bytes.Reader) (string, error) {
	var n int32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return "", err
	}
	if n < 0 || int(n) > r.Len() {
		return "", errors.New("bad string length")
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return string(b), err
}

// GrantsFromZKLog replays the children of parent (a lock's node) from an
// ensemble's transactions and returns the grants in the order the ensemble
// made them: a grant is a child becoming the lowest-sequenced one (the
// holder, in ZooKeeper's lock recipe), to the token its name carries
// (token-SEQUENCE), with its creation zxid as the fence. An ephemeral child
// goes with its session's closeSession.
//
// The record cannot tell whether the node's client saw itself lowest: a
// poller's node that became lowest just before its client, which had listed
// it behind another, deleted it is in the record too (unclaimed, and the
// token's later grant a re-grant: Input.Regrants).
func GrantsFromZKLog(txns []ZKTxn, parent string) []Grant {
	type node struct {
		name    string
		seq     int64
		czxid   int64
		session int64
	}
	live := map[string]node{}
	var grants []Grant
	lowest := ""
	for _, tx := range txns {
		dir, name := "", ""
		if i := strings.LastIndexByte(tx.Path, '/'); i >= 0 {
			dir, name = tx.Path[:i], tx.Path[i+1:]
		}
		switch {
		case tx.Type == zkCloseSession:
			for k, n := range live {
				if n.session == tx.Session {
					delete(live, k)
				}
			}
		case dir != parent:
			continue
		case tx.Type == zkCreate || tx.Type == zkCreate2:
			i := strings.LastIndexByte(name, '-')
			if i < 0 {
				continue
			}
			seq, err := strconv.ParseInt(name[i+1:], 10, 64)
			if err != nil {
				continue
			}
			live[name] = node{name: name, seq: seq, czxid: tx.Zxid, session: tx.Session}
		case tx.Type == zkDelete:
			delete(live, name)
		default:
			continue
		}
		var low *node
		for _, n := range live {
			if low == nil || n.seq < low.seq {
				low = &n
			}
		}
		if low == nil {
			lowest = ""
			continue
		}
		if low.name != lowest {
			lowest = low.name
			tok := low.name[:strings.LastIndexByte(low.name, '-')]
			grants = append(grants, Grant{Token: tok, Fence: low.czxid, Pos: len(grants)})
		}
	}
	return grants
}
