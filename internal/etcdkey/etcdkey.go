// Package etcdkey is the etcd backend's key and value layout (docs/wire.md,
// "etcd"), written once: the backend writes and reads it, and the fault
// harness reads etcd's history with it.
//
// An acquisition of lock key K on lease L writes the etcd key
// K + "\x00" + "\x01" + L as 16 lower-case hex digits (Name), whose value is
// its token, a NUL byte and its holder description (Value). A lock key never
// holds a NUL byte, so [K+"\x00", K+"\x01") (Range) holds the keys of K and
// of no other lock, even when one lock key is a prefix of another. Names are
// fixed-width: they sort by lease id, and none is a prefix of another.
//
// Earlier unreleased builds named the key after the token,
// K + "\x00" + token, with the holder description alone as its value; a
// token (26 base32 characters) never starts with "\x01", so Parse tells the
// two apart by the name, and reads the token from the name of an old one.
package etcdkey

import (
	"strconv"
	"strings"
)

const (
	sep       = "\x00" // ends the lock key in an etcd key
	leaseMark = "\x01" // starts the lease part of a lease-named key
	hexDigits = 16     // a lease id (int64) in lower-case hex, zero-padded
)

// Range is [start, end): the etcd keys of every acquisition of lock, and only
// of lock.
func Range(lock string) (start, end string) { return lock + sep, lock + "\x01" }

// Name is the etcd key of an acquisition of lock on lease.
func Name(lock string, lease int64) string {
	h := strconv.FormatUint(uint64(lease), 16)
	return lock + sep + leaseMark + strings.Repeat("0", hexDigits-len(h)) + h
}

// Value is the value of an acquisition's key: its token, a NUL byte, its
// holder description. A token never holds a NUL byte (the backend refuses
// one: ValidToken).
func Value(token, holder string) string { return token + sep + holder }

// ValidToken reports whether token can be written in a Value.
func ValidToken(token string) bool { return !strings.Contains(token, sep) }

// Parse reads the token and holder description of the etcd key key, of lock,
// holding value: from the value when key is lease-named, and from the name
// (the token) and the value (the description) when it is token-named. ok is
// false when key is not in lock's Range, or is lease-named and its value holds
// no token.
func Parse(lock string, key, value []byte) (token, holder string, ok bool) {
	start, _ := Range(lock)
	k := string(key)
	if !strings.HasPrefix(k, start) {
		return "", "", false
	}
	rest := k[len(start):]
	if !strings.HasPrefix(rest, leaseMark) {
		return rest, string(value), true // token-named
	}
	token, holder, ok = strings.Cut(string(value), sep)
	if !ok {
		return "", "", false
	}
	return token, holder, true
}
