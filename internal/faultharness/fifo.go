package faultharness

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
)

// FIFOReport is what CheckFIFO found in one lock server's AOF.
type FIFOReport struct {
	Grants     int // grants of the lock
	FromQueue  int // of them, to a token that was queued
	MaxQueue   int // the longest the queue was
	Violations []string
}

// CheckFIFO replays a FIFO lock's queue (internal/fifo: queueKey is a ZSET
// token -> join order) from one lock server's AOF, and checks every grant of
// lockKey against it: the lock goes to the head of the queue, or to anyone
// when the queue is empty. Waiters the grant's own script removed first
// (pruned as dead or timed out, or gone) do not count; a waiter that was
// pruned and came back joined at the tail again. A grant is a SET of
// lockKey (a script's effects: one MULTI/EXEC block). Any command on the
// queue the checker does not know is a violation, so a change of the
// scripts is noticed, not misread.
func CheckFIFO(cmds [][]string, lockKey, queueKey string, epoch int) FIFOReport {
	var rep FIFOReport
	queue := map[string]float64{}
	bad := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf("epoch %d: ", epoch)+fmt.Sprintf(format, args...))
	}
	apply := func(q map[string]float64, i int, c []string) {
		name := strings.ToUpper(c[0])
		switch name {
		case "ZADD":
			j := 2
			for j < len(c) && isZaddFlag(c[j]) {
				j++
			}
			for ; j+1 < len(c); j += 2 {
				s, err := strconv.ParseFloat(c[j], 64)
				if err != nil {
					bad("command %d %q: score %q", i, c, c[j])
					return
				}
				q[c[j+1]] = s
			}
		case "ZREM":
			for _, m := range c[2:] {
				delete(q, m)
			}
		case "DEL", "UNLINK":
			clear(q)
		case "PEXPIRE", "PEXPIREAT", "EXPIRE", "PERSIST":
		default:
			bad("command %d %q on the queue: unknown to the checker", i, c)
		}
	}
	// grant checks a grant of tok against q (the queue before the block,
	// less what the block removed besides tok).
	grant := func(i int, tok string, q map[string]float64) {
		rep.Grants++
		if _, ok := q[tok]; ok {
			rep.FromQueue++
		}
		head, hs := "", 0.0
		for m, s := range q {
			if head == "" || s < hs || (s == hs && m < head) {
				head, hs = m, s
			}
		}
		if head != "" && head != tok {
			where := "not queued"
			if s, ok := q[tok]; ok {
				where = fmt.Sprintf("queued at %.0f", s)
			}
			bad("command %d: the lock went to %s (%s) while %s, queued at %.0f, was at the head of the queue (%d waiting)", i, tok, where, head, hs, len(q))
		}
	}
	var block [][]string
	inMulti, blockPos := false, 0
	run := func(pos int, cmds [][]string) {
		// The grant in cmds, if any, is checked against the queue as the
		// commands before it left it, less the removals of other tokens
		// that follow in the same block (a release's prune).
		tok, at := "", -1
		for j, c := range cmds {
			if len(c) >= 3 && strings.EqualFold(c[0], "SET") && c[1] == lockKey {
				tok, _, _ = holder.Decode(c[2])
				at = j
			}
		}
		if at >= 0 {
			q := map[string]float64{}
			for m, s := range queue {
				q[m] = s
			}
			for j, c := range cmds {
				if len(c) < 2 || c[1] != queueKey {
					continue
				}
				if j < at {
					apply(q, pos+j, c)
				} else if strings.EqualFold(c[0], "ZREM") {
					for _, m := range c[2:] {
						if m != tok {
							delete(q, m)
						}
					}
				}
			}
			grant(pos+at, tok, q)
		}
		for j, c := range cmds {
			if len(c) >= 2 && c[1] == queueKey {
				apply(queue, pos+j, c)
			}
		}
		rep.MaxQueue = max(rep.MaxQueue, len(queue))
	}
	for i, c := range cmds {
		if len(c) == 0 {
			continue
		}
		switch strings.ToUpper(c[0]) {
		case "MULTI":
			inMulti, block, blockPos = true, block[:0], i+1
			continue
		case "EXEC":
			if inMulti {
				run(blockPos, block)
			}
			inMulti = false
			continue
		}
		if inMulti {
			block = append(block, c)
			continue
		}
		run(i, [][]string{c})
	}
	return rep
}

func isZaddFlag(s string) bool {
	switch strings.ToUpper(s) {
	case "NX", "XX", "GT", "LT", "CH", "INCR":
		return true
	}
	return false
}

// TimedWrite is an accepted write with the time the resource applied it
// (its record's clock, Unix ms).
type TimedWrite struct {
	Write
	At int64
}

// CheckHeldAt checks that every accepted write landed while the lock server
// held its lease: a write of lease T with fence f must not land more than
// slack after the grant that followed T's grant of f in the same AOF (the
// lock server then held another lease, so T held none). A grant's time is
// its SET's PXAT (Redis propagates SET PX as SET PXAT) less hold, the PX of
// every grant of the kind (min(TTL, the waiter TTL)). A write after a
// restart of the lock server (another epoch) is not judged here: the grants
// of the lost record are Check's. This is what a waiter that took a stale
// handover push as a grant breaks: its fn runs, and writes, while the lock
// server has given the lock to the next waiter.
func CheckHeldAt(cmds [][]string, lockKey, counterKey string, epoch int, hold, slack time.Duration, writes []TimedWrite) []string {
	gs, err := GrantsFromAOF(cmds, lockKey, counterKey, epoch)
	if err != nil {
		return []string{fmt.Sprintf("epoch %d: %v", epoch, err)}
	}
	// PXAT of each grant's SET, by its block's position (Grant.Pos: MULTI).
	at := map[int]int64{}
	block := -1
	for i, c := range cmds {
		if len(c) == 0 {
			continue
		}
		switch strings.ToUpper(c[0]) {
		case "MULTI":
			block = i
		case "EXEC":
			block = -1
		case "SET":
			if block < 0 || len(c) < 3 || c[1] != lockKey {
				continue
			}
			for j := 3; j+1 < len(c); j++ {
				if strings.EqualFold(c[j], "PXAT") {
					if ms, err := strconv.ParseInt(c[j+1], 10, 64); err == nil {
						at[block] = ms - hold.Milliseconds()
					}
				}
			}
		}
	}
	type key struct {
		tok   string
		fence int64
	}
	next := map[key]Grant{} // a grant -> the grant after it
	for i := 0; i+1 < len(gs); i++ {
		next[key{gs[i].Token, gs[i].Fence}] = gs[i+1]
	}
	var bad []string
	for _, w := range writes {
		tok := ValueToken(w.Value)
		n, ok := next[key{tok, w.Fence}]
		if !ok || n.Token == tok {
			continue // T's last grant of this epoch, not of this epoch, or T granted again
		}
		start, ok := at[n.Pos]
		if !ok {
			bad = append(bad, fmt.Sprintf("epoch %d: grant at command %d (lease %s): no SET PXAT, its time unknown to the checker", epoch, n.Pos, n.Token))
			continue
		}
		if late := time.Duration(w.At-start) * time.Millisecond; late > slack {
			bad = append(bad, fmt.Sprintf("epoch %d: accepted write %q (lease %s, fence %d) landed %v after the lock server granted the lock to lease %s (fence %d): it held no lease then",
				epoch, w.Value, tok, w.Fence, late, n.Token, n.Fence))
		}
	}
	return bad
}
