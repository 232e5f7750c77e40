package faultharness

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/lockkit/lockkit/internal/holder"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadAOF returns the commands of a Redis 7 multi-part append-only file
// directory (appendonlydir: a manifest naming a base file and incremental
// files), base first, then the incremental files in manifest order. The base
// must be in RESP form (aof-use-rdb-preamble no); an RDB-preamble base is an
// error. A last command cut short (the server was killed while writing it, so
// it was never acknowledged) is dropped.
func ReadAOF(dir string) ([][]string, error) {
	manifest, err := os.ReadFile(filepath.Join(dir, "appendonly.aof.manifest"))
	if err != nil {
		return nil, err
	}
	var base string
	var incr []string
	for line := range strings.Lines(string(manifest)) {
		f := strings.Fields(line)
		m := map[string]string{}
		for i := 0; i+1 < len(f); i += 2 {
			m[f[i]] = f[i+1]
		}
		switch m["type"] {
		case "b":
			base = m["file"]
		case "i":
			incr = append(incr, m["file"])
		}
	}
	var cmds [][]string
	for _, name := range append([]string{base}, incr...) {
		if name == "" {
			continue
		}
		c, err := readAOFFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c...)
	}
	return cmds, nil
}

func readAOFFile(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	if b, err := br.Peek(5); err == nil && string(b) == "REDIS" {
		return nil, fmt.Errorf("%s: an RDB-preamble base; run the server with --aof-use-rdb-preamble no", path)
	}
	var cmds [][]string
	for {
		cmd, err := readRESPCommand(br)
		if err == io.EOF {
			return cmds, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return cmds, nil // torn tail: never acknowledged
		}
		if err != nil {
			return nil, fmt.Errorf("%s: command %d: %w", path, len(cmds), err)
		}
		cmds = append(cmds, cmd)
	}
}

// readRESPCommand reads one command: a RESP array of bulk strings. Lines
// starting with '#' (AOF annotations) are skipped.
func readRESPCommand(br *bufio.Reader) ([]string, error) {
	var line string
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && l == "" {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		line = strings.TrimSuffix(l, "\r\n")
		break
	}
	if len(line) < 2 || line[0] != '*' {
		return nil, fmt.Errorf("expected a RESP array, got %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return nil, io.ErrUnexpectedEOF
		}
		hdr = strings.TrimSuffix(hdr, "\r\n")
		if len(hdr) < 2 || hdr[0] != '$' {
			return nil, fmt.Errorf("expected a bulk string, got %q", hdr)
		}
		size, err := strconv.Atoi(hdr[1:])
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk header %q", hdr)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, io.ErrUnexpectedEOF
		}
		cmd[i] = string(buf[:size])
	}
	return cmd, nil
}

// Grant is one lease grant as the lock server recorded it.
type Grant struct {
	Token string
	Fence int64
	Epoch int // index of the AOF directory it was read from
	Pos   int // its command index there
	// Earlier are the fences of the token's earlier grants when it was
	// granted again (Input.Regrants), set by the checker.
	Earlier []int64
}

// GrantsFromAOF replays the commands of one lock server's AOF and returns the
// grants of lockKey in the order the server made them. A grant is a
// MULTI/EXEC block (a script's effects) that SETs lockKey to a token and
// changes the counter: its fence is the counter's value after the block.
// The counter is replayed from every command that touches it (SET, INCR,
// INCRBY, DEL), base file included; any other command on it is an error, so
// a change of the runtime's script is noticed, not misread.
func GrantsFromAOF(cmds [][]string, lockKey, counterKey string, epoch int) ([]Grant, error) {
	var (
		counter  int64
		inMulti  bool
		token    string
		touched  bool
		grants   []Grant
		blockPos int
	)
	for i, c := range cmds {
		if len(c) == 0 {
			continue
		}
		name := strings.ToUpper(c[0])
		switch name {
		case "MULTI":
			inMulti, token, touched, blockPos = true, "", false, i
			continue
		case "EXEC":
			if inMulti && token != "" && touched {
				grants = append(grants, Grant{Token: token, Fence: counter, Epoch: epoch, Pos: blockPos})
			}
			inMulti = false
			continue
		}
		if len(c) < 2 {
			continue
		}
		for _, k := range keysOf(name, c) {
			switch k {
			case counterKey:
				v, err := applyCounter(counter, name, c)
				if err != nil {
					return nil, fmt.Errorf("command %d %q: %w", i, c, err)
				}
				counter, touched = v, true
			case lockKey:
				if name == "SET" && inMulti {
					token, _, _ = holder.Decode(c[2]) // the token, without who holds it
				}
			}
		}
	}
	return grants, nil
}

// keysOf lists the keys a command writes, for the commands a lock server's
// AOF holds (DEL and UNLINK may name several).
func keysOf(name string, c []string) []string {
	switch name {
	case "DEL", "UNLINK":
		return c[1:]
	case "SELECT", "PING", "FLUSHALL", "FLUSHDB":
		return nil
	}
	return c[1:2]
}

func applyCounter(v int64, name string, c []string) (int64, error) {
	switch {
	case name == "SET" && len(c) >= 3:
		return strconv.ParseInt(c[2], 10, 64)
	case name == "INCR":
		return v + 1, nil
	case name == "INCRBY" && len(c) >= 3:
		d, err := strconv.ParseInt(c[2], 10, 64)
		return v + d, err
	case name == "DEL" || name == "UNLINK":
		return 0, nil
	case name == "PEXPIREAT" || name == "PERSIST":
		return v, nil
	}
	return 0, fmt.Errorf("the fence counter changed by a command the checker does not know")
}

// Write is one write a resource applied, in the order it applied them.
type Write struct {
	Value string
	Fence int64
	Pos   int
}

// WritesFromAOF returns the HSETs (HMSETs) of key's "value" and "fence"
// fields: the accepted fence.Set calls, in the order the server applied them.
func WritesFromAOF(cmds [][]string, key string) ([]Write, error) {
	var out []Write
	for i, c := range cmds {
		if len(c) < 2 || c[1] != key {
			continue
		}
		switch strings.ToUpper(c[0]) {
		case "HSET", "HMSET":
		default:
			continue
		}
		w := Write{Pos: i}
		for j := 2; j+1 < len(c); j += 2 {
			switch c[j] {
			case "value":
				w.Value = c[j+1]
			case "fence":
				f, err := strconv.ParseInt(c[j+1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("command %d: fence %q", i, c[j+1])
				}
				w.Fence = f
			}
		}
		out = append(out, w)
	}
	return out, nil
}
