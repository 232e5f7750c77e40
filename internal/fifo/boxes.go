package fifo

import (
	"hash/maphash"
	"sync/atomic"
)

// go-redis takes a command as []any, and putting a string in an interface
// value (boxing it) costs an allocation every time. The strings a FIFO
// script names repeat: a key's derived names on each of its acquires and
// its release, a Notifier's channel for the key, a client's holder
// description. So their boxes are kept, in small caches of entries that
// never change once stored (a keyNames' token slot aside): a box may serve
// any number of commands at once, and go-redis, its hooks and Cmd.String()
// see the same strings as before.

// cache keeps entries by a string key: a set per hash, cacheWays entries a
// set, the newest first. A miss costs building the entry; it pushes the
// set's oldest entry out. Entries are swapped atomically and read without a
// lock (a lookup racing a miss in its set may miss too, and build again).
type cache[E any, P interface {
	*E
	cacheKey() string
}] struct {
	sets []([cacheWays]atomic.Pointer[E])
	bits uint
}

// cacheWays is the entries a set holds: with 4, five of the 32 keys of
// BenchmarkParallelAcquireReleaseFIFO all but never share one of 256 sets
// (with 2, three of them shared one in about one process of 13, its hash
// seed random, and pushed each other out on every call).
const cacheWays = 4

func newCache[E any, P interface {
	*E
	cacheKey() string
}](bits uint) cache[E, P] {
	return cache[E, P]{sets: make([][cacheWays]atomic.Pointer[E], 1<<bits), bits: bits}
}

var cacheSeed = maphash.MakeSeed()

// get is key's entry, made by build when the set does not hold it.
func (c *cache[E, P]) get(key string, build func(string) *E) *E {
	s := &c.sets[maphash.String(cacheSeed, key)>>(64-c.bits)]
	for i := range s {
		if e := s[i].Load(); e != nil && P(e).cacheKey() == key {
			return e
		}
	}
	e := build(key)
	for i := len(s) - 1; i > 0; i-- {
		s[i].Store(s[i-1].Load())
	}
	s[0].Store(e)
	return e
}

// keyNames is what the scripts name for one lock key, boxed: the key, then
// key+suffix for each of keySuffixes. token is the last token an Acquire on
// the key boxed (keepToken), for its Release (tokenArg).
type keyNames struct {
	key   string
	args  [1 + len(keySuffixes)]any
	token atomic.Value // any: a string, boxed
}

func (e *keyNames) cacheKey() string { return e.key }

const namesBits = 8

// names keeps the keyNames of the keys in use: cacheWays × 2^namesBits of
// them.
var names = newCache[keyNames](namesBits)

// namesOf is key's boxed names.
func namesOf(key string) *keyNames { return names.get(key, newKeyNames) }

func newKeyNames(key string) *keyNames {
	e := &keyNames{key: key}
	all := derived(key, keySuffixes[:]) // one string for all the names
	e.args[0] = key
	for i, s := range keySuffixes {
		e.args[1+i] = all[:len(key)+len(s)]
		all = all[len(key)+len(s):]
	}
	return e
}

// command is the command rediswire.RunArgs sends for a script whose keys
// are e's key and the names of the first suffixes of keySuffixes, then
// args: its two first slots are left for RunArgs, and the slice is its one
// allocation.
func (e *keyNames) command(suffixes int, args ...any) []any {
	a := make([]any, 3, 3+1+suffixes+len(args))
	a[2] = 1 + suffixes // a small int: boxing it costs nothing
	a = append(a, e.args[:1+suffixes]...)
	return append(a, args...)
}

// keepToken is token boxed, kept for tokenArg.
func (e *keyNames) keepToken(token string) any {
	var v any = token
	e.token.Store(v)
	return v
}

// tokenArg is token as a command argument: the box the key's last Acquire
// kept when that was token's (a lock's release follows its acquire), else a
// new one.
func (e *keyNames) tokenArg(token string) any {
	if v := e.token.Load(); v != nil {
		if t, _ := v.(string); t == token {
			return v
		}
	}
	return token
}

// boxedText is a string and its box.
type boxedText struct {
	s string
	v any
}

func (e *boxedText) cacheKey() string { return e.s }

const textBits = 4

// texts keeps the boxes of the holder descriptions in use (a client's is
// the same on every attempt unless traced).
var texts = newCache[boxedText](textBits)

// textArg is s as a command argument, its box kept in texts. "" costs
// nothing to box.
func textArg(s string) any {
	if s == "" {
		return ""
	}
	return texts.get(s, newBoxedText).v
}

func newBoxedText(s string) *boxedText { return &boxedText{s: s, v: s} }

// wakeName is a lock key's channel on one Notifier, and the channel boxed.
type wakeName struct {
	key, ch string
	arg     any
}

func (e *wakeName) cacheKey() string { return e.key }

const wakeBits = 7

// wakeOf is key's wakeName on n.
func (n *Notifier) wakeOf(key string) *wakeName {
	return n.wakes.get(key, n.newWakeName)
}

func (n *Notifier) newWakeName(key string) *wakeName {
	ch := key + ChannelSuffix + n.id
	return &wakeName{key: key, ch: ch, arg: ch}
}
