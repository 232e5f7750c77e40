package schema

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// version is the only schema version this package reads (the file's "version").
const version = 1

// maxPatternLen bounds a pattern's length in bytes; longer patterns are rejected.
const maxPatternLen = 256

//go:embed lockkit.schema.json
var jsonSchema []byte

// JSONSchema returns the JSON Schema (draft-07) of lockkit.yaml, for editors
// (point a "# yaml-language-server: $schema=" modeline at
// schema/lockkit.schema.json) and tools. Each call returns a new copy.
func JSONSchema() []byte { return bytes.Clone(jsonSchema) }

// File is a valid, fully resolved lockkit.yaml: defaults are applied to every
// domain, names are derived, and every check has passed.
type File struct {
	Path    string    // the file name as given to Parse or Load
	Version int       // always 1, the only version this package reads
	Package string    // Go package name of the generated file
	Prefix  string    // key prefix, never empty ("lock:" when not set)
	Domains []*Domain // in file order
}

// Domain is one lock domain: a key pattern and the policy of its locks.
type Domain struct {
	Name           string    // low-cardinality name, [a-z][a-z0-9_]*: "user_digest"
	GoName         string    // exported Go name: "UserDigest"
	Pattern        string    // as written: "user:{id:int64}:digest"
	Segments       []Segment // the pattern, parsed
	Description    string    // free text, may hold several lines; "" when not given
	TTL            time.Duration
	Renew          time.Duration // 0: the runtime's default (TTL/3); < 0: never renew ("none")
	Retry          Retry
	Fencing        bool
	Replicas       int           // replicas that must hold the lock (Redis WAIT) before a lease is granted; 0: do not wait
	ReplicaTimeout time.Duration // bound on that wait; 0: the runtime's default (50ms), and always 0 when Replicas is 0
	Wait           string        // how acquisitions wait for a held lock: "poll" (the default) or "fifo"
	MaxHold        time.Duration // cap on one lease's total hold, above TTL; 0: no cap
	Kind           string        // "lock" (the default), "election" or "semaphore"
	Permits        int           // a semaphore's permits, >= 1; 0 for any other kind
	Pos            Pos           // where the domain's entry starts (its first key)
	PatternPos     Pos           // where its pattern value starts
}

// Params returns the domain's parameters in pattern order.
func (d *Domain) Params() []Segment {
	if d == nil {
		return nil
	}
	var ps []Segment
	for _, s := range d.Segments {
		if s.IsParam() {
			ps = append(ps, s)
		}
	}
	return ps
}

// Segment is one piece of a pattern: a literal, or a typed parameter.
type Segment struct {
	Literal string    // the literal text, when Param is ""
	Param   string    // the parameter's name, "" for a literal
	Type    ParamType // the parameter's type
}

// IsParam reports whether the segment is a parameter.
func (s Segment) IsParam() bool { return s.Param != "" }

// ParamType is the type of a pattern parameter, as written after the colon
// in "{id:int64}". A parameter without a type is a string.
type ParamType string

// The parameter types.
const (
	TypeString ParamType = "string"
	TypeInt    ParamType = "int"
	TypeInt32  ParamType = "int32"
	TypeInt64  ParamType = "int64"
	TypeUint   ParamType = "uint"
	TypeUint32 ParamType = "uint32"
	TypeUint64 ParamType = "uint64"
)

// paramTypes are every parameter type, in the order messages show them.
var paramTypes = [...]ParamType{TypeString, TypeInt, TypeInt32, TypeInt64, TypeUint, TypeUint32, TypeUint64}

func (t ParamType) valid() bool {
	return slices.Contains(paramTypes[:], t)
}

// Retry is a domain's acquire retry policy. Attempts is the total number of
// attempts including the first; 1 means a single attempt ("retry: none"),
// and then the other fields are zero; 0 means attempts are not counted and
// MaxWait (then > 0) bounds the wait ("retry: {max_wait: 5s}").
type Retry struct {
	Attempts   int
	Initial    time.Duration // first backoff
	Max        time.Duration // cap on one backoff
	Multiplier float64       // backoff growth, >= 1
	Jitter     float64       // randomization factor in [0, 1]
	MaxWait    time.Duration // bound on the total time spent acquiring; 0: none
}

// None reports whether the policy is a single attempt.
func (r Retry) None() bool { return r.Attempts == 1 || r.Attempts <= 0 && r.MaxWait <= 0 }

// maxFileSize bounds how much of a schema file Load reads: a schema is a few
// kilobytes, and a path such as /dev/zero or a mistaken binary must not be
// read without end.
const maxFileSize = 1 << 20

// Load reads and parses the schema file at path. A read failure is returned
// as is; problems in the file as Errors. A file larger than 1 MiB (or one
// that never ends, such as /dev/zero) is refused without reading the rest.
func Load(path string) (*File, error) {
	data, err := readLimited(path, maxFileSize)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readLimited reads path, refusing it once more than limit bytes have come.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("%s: is a directory, not a schema file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes; a lockkit schema is a small YAML file (is -config the right file?)", path, limit)
	}
	return data, nil
}
