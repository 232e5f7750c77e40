package lockkit

import (
	"fmt"
	"strconv"

	"github.com/lockkit/lockkit/internal/policy"
)

// internal/policy lays out a lock key (Prefix, then the suffix in braces)
// and its fencing counter (policy.FenceKey). The braces are a Redis Cluster
// hash tag, so a lock and its counter always share a slot; the escaping
// below keeps '{' and '}' out of parameters so a parameter can never move
// the tag.

// KeyBuilder builds one lock key of a domain, for generated code. Each method
// appends to the key and returns the builder; Lock finishes it. Building a key
// costs two small allocations (the buffer and the final string).
type KeyBuilder struct {
	d   *Domain
	buf []byte
}

// Key starts a key of this domain. sizeHint is the expected length of the
// part after the prefix (literals plus parameters), so the buffer is allocated once.
func (d *Domain) Key(sizeHint int) KeyBuilder {
	if d == nil {
		return KeyBuilder{}
	}
	// The hint only sizes the first allocation: a negative or huge one
	// (a bug in the caller, or a hostile length) must not panic or
	// allocate gigabytes; append grows the buffer as needed.
	sizeHint = max(0, min(sizeHint, maxKeyHint))
	buf := make([]byte, 0, len(d.prefix)+sizeHint+2+8)
	buf = policy.AppendKeyOpen(buf, d.prefix)
	return KeyBuilder{d: d, buf: buf}
}

// maxKeyHint bounds Key's sizeHint: no lock key needs a larger first buffer.
const maxKeyHint = 4096

// Literal appends a fixed part of the domain's pattern, verbatim.
func (b KeyBuilder) Literal(s string) KeyBuilder { b.buf = append(b.buf, s...); return b }

// String appends a string parameter, escaped so that the key stays
// injective and readable: the bytes '%', ':', '{', '}', every control byte
// (< 0x20) and DEL (0x7f) become %XX with upper-case hex; everything else,
// unicode included, is kept as it is. So an encoded parameter never contains
// ':', '{' or '}', and two different strings never encode to the same key.
func (b KeyBuilder) String(s string) KeyBuilder { b.buf = policy.AppendParam(b.buf, s); return b }

// Int appends a signed integer parameter in decimal.
func (b KeyBuilder) Int(v int64) KeyBuilder { b.buf = strconv.AppendInt(b.buf, v, 10); return b }

// Uint appends an unsigned integer parameter in decimal.
func (b KeyBuilder) Uint(v uint64) KeyBuilder { b.buf = strconv.AppendUint(b.buf, v, 10); return b }

// Lock finishes the key and returns the Lock on it. A builder from a nil
// Domain returns the zero Lock, whose methods return ErrNoClient.
func (b KeyBuilder) Lock() Lock {
	l := b.finish()
	if l.d != nil && l.err == nil && l.d.policy.Kind == policy.KindSemaphore {
		l.err = fmt.Errorf("lockkit: domain %q is kind %s: use its Semaphore", l.d.name, policy.KindSemaphore)
	}
	if l.d != nil && l.err == nil && l.d.policy.Kind == policy.KindElection {
		l.err = fmt.Errorf("lockkit: domain %q is kind %s: use its Election", l.d.name, policy.KindElection)
	}
	return l
}

// finish finishes the key, as Lock or Semaphore.
func (b KeyBuilder) finish() Lock {
	if b.d == nil {
		return Lock{}
	}
	// Copy rather than alias the buffer: a builder value used again after Lock
	// would otherwise overwrite the closing brace of a key already handed out.
	key := string(policy.AppendKeyClose(b.buf))
	// The tag is what lies between the prefix's '{' and the final '}'. A
	// bad one is refused by every method of the Lock (its acquisitions).
	err := policy.CheckTag(key, key[len(b.d.prefix)+1:len(key)-1])
	if err != nil {
		err = fmt.Errorf("lockkit: %w", err)
	}
	return Lock{d: b.d, key: key, err: err}
}
