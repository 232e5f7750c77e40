package faultharness

import (
	"fmt"
	"strconv"
	"strings"

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
