package faultharness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Event is one line of a worker's history file. Times are Unix nanoseconds
// of the machine's real-time clock, which the test and every worker share.
type Event struct {
	// Ev is what happened:
	//   start     the worker started (Pid)
	//   acqfail   an acquisition ended without a lease (Err, Out: notacquired,
	//             unavailable, other)
	//   grant     a lease was granted (Tok, Fence)
	//   call      an operation on a resource was sent (Op, Kind, Res, Tok,
	//             Fence, Value for a write)
	//   ret       its result (Op, Out: ok, fenced, error, aborted (surely
	//             not applied: its transaction rolled back) for a write; ok,
	//             error for a read; Value, Fence for a read; Cur for fenced)
	//   skip      the lease was found lost right before a write (Res, Tok)
	//   selfstop  the worker stops itself (SIGSTOP) right after the validity
	//             check of the write to Res, before the write (Tok, Fence)
	//   done      Do returned (Tok, Err, Out: ok, lost, error)
	//   fnret     fn is about to return nil (Tok): the section's work is done
	//             and the lease still held as far as the worker knows
	//   setdone   DoAll returned, for the set's other leases (Tok)
	//   exit      clean exit after SIGTERM
	Ev    string `json:"ev"`
	W     int    `json:"w"`   // worker id
	Inc   int    `json:"inc"` // incarnation: 0, then +1 for every restart
	T     int64  `json:"t"`
	Pid   int    `json:"pid,omitempty"`
	Op    int64  `json:"op,omitempty"`
	Kind  string `json:"kind,omitempty"` // read, write
	Res   string `json:"res,omitempty"`  // redis, pg
	Tok   string `json:"tok,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	Value string `json:"value,omitempty"`
	Out   string `json:"out,omitempty"`
	Cur   int64  `json:"cur,omitempty"`
	Err   string `json:"err,omitempty"`
	Key   string `json:"key,omitempty"` // grant: the lock's key (kinds with several)
}

// Resources.
const (
	ResRedis = "redis"
	ResPG    = "pg"
)

// EncodeValue is the value a worker writes: worker, incarnation, lease token
// and operation id, so that a resource's record joins to the grant.
func EncodeValue(w, inc int, token string, op int64) string {
	return fmt.Sprintf("w%d.%d/%s/%d", w, inc, token, op)
}

// ValueToken is the lease token inside a value written by EncodeValue, or "".
func ValueToken(v string) string {
	parts := strings.Split(v, "/")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// ReadHistory reads a worker's history file. A last line cut short (the
// worker was killed while writing it) is dropped.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a torn last line
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
