// Package inspect lists the live locks of a lockkit schema in Redis: each
// lock's key and decoded parameters, its holder (the lease token and, when
// the runtime recorded one, the holder's host, pid, owner name and trace
// id), the TTL left, the fence, and its FIFO waiters (order, time waited,
// who). It is the library behind `lockkit inspect`, and, with Watch and
// ForceRelease, behind `lockkit watch` and `lockkit release -force`.
//
// Inspect and Watch are read-only and bounded; ForceRelease is the one
// writer (see its doc). Inspect is bounded: it sends SCAN (never KEYS), GET, PTTL and
// ZCARD, and for a lock with FIFO waiters TIME, ZRANGE key:q and HMGET
// key:qc, and nothing else; it stops after Options.Limit locks or at
// Options.Timeout, whichever comes first, and says so (Report.Stopped). On a
// Redis Cluster it scans every master.
//
// # How it scans
//
// One SCAN pass with MATCH <prefix>{*} covers every domain (a SCAN pass
// walks the whole keyspace whatever the pattern, so one pass per domain would
// cost as many passes as domains). With one domain selected (Options.Domain),
// the pattern spells out that domain's literals and the parameters fixed by
// Options.Params (lock:{table:12}, lock:{cron:*:480000}), so Redis filters
// on its side. Every pattern ends with '}', so the derived keys (key:fence,
// key:q, key:qd, key:qc, key:qp) never match. Each page of keys is decoded
// against the schema (Decoder); keys that no domain produces are skipped,
// and for the rest one pipeline per page sends PTTL key, GET key, GET
// key:fence and ZCARD key:q; for the locks with a queue, a second pipeline
// reads its first MaxWaiters waiters (ZRANGE key:q WITHSCORES, against the
// server's TIME, and their descriptions with HMGET key:qc). A key that is gone by then is skipped; one that
// is not a string (a fence.Set resource hash, say), or that resharding
// moved to another master since the SCAN, is counted in Report.Skipped.
package inspect

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/schema"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultLimit     = 1000
	DefaultTimeout   = 5 * time.Second
	DefaultScanCount = 1000
)

// Options select the locks to list and bound the work.
type Options struct {
	// Domain, when set, lists only that domain's locks (its name).
	Domain string
	// Params lists only locks whose parameter of that name has that value,
	// as written on a command line ("id" → "12"); an integer parameter
	// compares as a number. A domain without the parameter shows nothing.
	Params map[string]string
	// Limit stops the listing after that many locks; 0: DefaultLimit.
	Limit int
	// Timeout stops the listing after that long; 0: DefaultTimeout.
	Timeout time.Duration
	// ScanCount is SCAN's COUNT hint; 0: DefaultScanCount.
	ScanCount int64
}

// Lock is one live lock. JSON field names are stable.
type Lock struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	// KeyBase64 is the key's exact bytes, base64 (standard encoding), when
	// they are not valid UTF-8: JSON strings cannot carry such bytes, so
	// Key holds U+FFFD in their place.
	KeyBase64 string         `json:"key_base64,omitempty"`
	Params    map[string]any `json:"params"` // string, int64 or uint64 values
	// Token is the lease token: the lock's value up to the first ';'.
	Token string `json:"token"`
	// Holder is the holder description the runtime stored with the token;
	// nil when there is none (runtimes before holder descriptions).
	Holder *Holder `json:"holder,omitempty"`
	// TTL left in milliseconds; -1 when the key has no expiry.
	TTLMillis int64 `json:"ttl_ms"`
	// Fence is the value of key:fence; nil when there is none.
	Fence *int64 `json:"fence"`
	// Queue is the number of FIFO waiters (ZCARD key:q).
	Queue int64 `json:"queue"`
	// Waiters are the first MaxWaiters FIFO waiters, head first, with how
	// long each has waited and who it is; omitted when the queue is empty.
	Waiters []Waiter `json:"waiters,omitempty"`
	// Node is the Cluster master holding the key; "" off Cluster.
	Node string `json:"node,omitempty"`
	// Problem says what is odd about the lock, if anything: an undecodable
	// value, a fence that is not a number.
	Problem string `json:"problem,omitempty"`

	params []Param
}

// Holder is who holds a lock, as recorded by the runtime.
type Holder struct {
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Owner   string `json:"owner,omitempty"`
	TraceID string `json:"trace_id,omitempty"`
}

// Report is the result of one listing.
type Report struct {
	Locks []Lock `json:"locks"` // sorted by domain, then key
	// Scanned counts the keys SCAN returned (matching the pattern).
	Scanned int64 `json:"scanned"`
	// Skipped counts keys that matched but are not locks of the schema (or
	// of the selected domain and parameters), or are not strings.
	Skipped int64 `json:"skipped"`
	// Complete is true when every master was scanned to the end.
	Complete bool `json:"complete"`
	// Stopped says why the listing is not complete: "limit" or "timeout".
	Stopped string `json:"stopped,omitempty"`
	Limit   int    `json:"limit"`
	Timeout string `json:"timeout"`
}

// Inspector lists the locks of one schema.
type Inspector struct {
	file *schema.File
	dec  *Decoder
}

// New returns the Inspector of f.
func New(f *schema.File) *Inspector { return &Inspector{file: f, dec: NewDecoder(f)} }

// filter is Options, checked against the schema.
type filter struct {
	domain *schema.Domain
	params map[string]string // name → encoded value, for domain's glob
	// want: per domain, name → the value its locks must have; a domain
	// missing from want (when Params are given) has none of the parameters.
	want  map[*schema.Domain]map[string]Param
	nwant int
	glob  string
}

func (in *Inspector) compile(o Options) (*filter, error) {
	f := &filter{}
	scope := in.file.Domains
	if o.Domain != "" {
		for _, d := range in.file.Domains {
			if d.Name == o.Domain {
				f.domain = d
			}
		}
		if f.domain == nil {
			var names []string
			for _, d := range in.file.Domains {
				names = append(names, d.Name)
			}
			return nil, fmt.Errorf("no domain %q in %s (domains: %v)", o.Domain, in.file.Path, names)
		}
		scope = []*schema.Domain{f.domain}
	}
	f.want = map[*schema.Domain]map[string]Param{}
	if f.domain != nil {
		f.params = map[string]string{}
	}
	for name, v := range o.Params {
		found, accepted := false, false
		var why []string
		for _, d := range scope {
			for _, s := range d.Params() {
				if s.Param != name {
					continue
				}
				found = true
				p, err := parseFilterValue(s, v)
				if err != nil {
					// This domain's locks cannot match; the others may.
					why = append(why, fmt.Sprintf("%s in domain %s (pattern %q)", err, d.Name, d.Pattern))
					if f.want[d] == nil {
						f.want[d] = map[string]Param{}
					}
					f.want[d][name] = Param{Name: "\x00never"}
					continue
				}
				accepted = true
				if f.want[d] == nil {
					f.want[d] = map[string]Param{}
				}
				f.want[d][name] = p
				if d == f.domain {
					f.params[name] = string(appendParam(nil, s.Type, p))
				}
			}
		}
		if !found {
			where := "any domain"
			if f.domain != nil {
				where = "domain " + f.domain.Name + " (pattern " + strconv.Quote(f.domain.Pattern) + ")"
			}
			return nil, fmt.Errorf("param %s=%s: no parameter %q in %s", name, v, name, where)
		}
		if !accepted {
			return nil, fmt.Errorf("param %s=%s: %s", name, v, strings.Join(why, "; "))
		}
	}
	f.nwant = len(o.Params)
	if f.domain != nil {
		f.glob = in.dec.glob(f.domain, f.params)
	} else {
		f.glob = in.dec.globAll()
	}
	return f, nil
}

func parseFilterValue(s schema.Segment, v string) (Param, error) {
	p := Param{Name: s.Param, Type: s.Type}
	var err error
	switch policy.EncodingOf(string(s.Type)) {
	case policy.EncInt:
		p.Int, err = strconv.ParseInt(v, 10, bitSize(s.Type))
	case policy.EncUint:
		p.Uint, err = strconv.ParseUint(v, 10, bitSize(s.Type))
	default:
		p.Str = v
	}
	if err != nil {
		return p, fmt.Errorf("%s takes %s values", s.Param, s.Type)
	}
	return p, nil
}

// keep reports whether a decoded key passes the filter.
func (f *filter) keep(d *schema.Domain, ps []Param) bool {
	if f.domain != nil && d != f.domain {
		return false
	}
	if f.nwant == 0 {
		return true
	}
	want := f.want[d]
	if len(want) != f.nwant {
		return false // the domain lacks one of the parameters
	}
	for name, w := range want {
		ok := false
		for _, p := range ps {
			if p.Name == name {
				ok = p == w
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

var errTimeout = errors.New("inspect: timeout")

// Glob returns the SCAN MATCH pattern Inspect uses for o.
func (in *Inspector) Glob(o Options) (string, error) {
	f, err := in.compile(o)
	if err != nil {
		return "", err
	}
	return f.glob, nil
}

// Inspect lists the live locks on rdb (a *redis.Client, a failover client or
// a *redis.ClusterClient). Reaching the limit or the timeout is not an
// error: the Report says where it stopped. An error is a bad option, or
// Redis failing or ctx ending.
func (in *Inspector) Inspect(ctx context.Context, rdb redis.UniversalClient, o Options) (*Report, error) {
	f, err := in.compile(o)
	if err != nil {
		return nil, err
	}
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ScanCount <= 0 {
		o.ScanCount = DefaultScanCount
	}
	rep := &Report{Locks: []Lock{}, Limit: o.Limit, Timeout: o.Timeout.String()}
	run := &run{in: in, f: f, o: o, rep: rep}
	deadline := time.Now().Add(o.Timeout)
	tctx, cancel := context.WithDeadlineCause(ctx, deadline, errTimeout)
	defer cancel()

	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(tctx, func(ctx context.Context, node *redis.Client) error {
			return run.scan(ctx, node, node.Options().Addr)
		})
	} else {
		err = run.scan(tctx, rdb, "")
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, err
	case !run.answered.Load():
		// The timeout came before Redis answered anything (unreachable,
		// a bad socket, a Sentinel that never named a master): that is
		// no listing at all, whatever the timeout.
		return nil, fmt.Errorf("%w (no answer from Redis within %v)", err, o.Timeout)
	case tctx.Err() != nil && errors.Is(context.Cause(tctx), errTimeout), !time.Now().Before(deadline):
		// Our deadline: a network timeout at the deadline may come a
		// moment before the context says so.
		rep.Stopped = "timeout"
	default:
		return nil, err
	}
	if rep.Stopped == "" && run.full {
		rep.Stopped = "limit"
	}
	rep.Complete = rep.Stopped == ""
	sort.Slice(rep.Locks, func(i, j int) bool {
		a, b := rep.Locks[i], rep.Locks[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		return a.Key < b.Key
	})
	return rep, nil
}

type run struct {
	in  *Inspector
	f   *filter
	o   Options
	mu  sync.Mutex
	rep *Report
	// full: the limit was reached with locks left over.
	full bool
	// answered: some SCAN got a reply. A timeout before any reply is Redis
	// not answering (an error), not a listing cut short.
	answered atomic.Bool
}

type cand struct {
	key string
	d   *schema.Domain
	ps  []Param
}

// add lists locks, as many as the limit leaves room for; locks found past
// the limit mark the listing as cut short. The limit counts listed locks
// only: a candidate that turned out not to be one (released since the SCAN,
// not a string) takes no place, whichever node's scan got there first.
func (r *run) add(locks []Lock, skipped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if left := r.o.Limit - len(r.rep.Locks); len(locks) > left {
		r.full = true
		locks = locks[:left]
	}
	r.rep.Locks = append(r.rep.Locks, locks...)
	r.rep.Skipped += int64(skipped)
}

func (r *run) scan(ctx context.Context, rdb redis.Cmdable, node string) error {
	seen := map[string]bool{}
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, r.f.glob, r.o.ScanCount).Result()
		if err != nil {
			return fmt.Errorf("SCAN %s: %w", nodeName(node), err)
		}
		r.answered.Store(true)
		var cands []cand
		skipped := 0
		for _, k := range keys {
			if seen[k] {
				continue // SCAN may return a key twice
			}
			seen[k] = true
			d, ps, ok := r.in.dec.Decode(k)
			if !ok || !r.f.keep(d, ps) {
				skipped++
				continue
			}
			cands = append(cands, cand{k, d, ps})
		}
		r.mu.Lock()
		r.rep.Scanned += int64(len(keys))
		r.rep.Skipped += int64(skipped)
		r.mu.Unlock()
		if len(cands) > 0 {
			locks, skipped, err := r.fetch(ctx, rdb, node, cands)
			if err != nil {
				return err
			}
			r.add(locks, skipped)
		}
		r.mu.Lock()
		// Once the limit is reached, the scan goes on until it finds one
		// more lock (and stops: more exist) or ends (complete).
		full := r.full
		r.mu.Unlock()
		if next == 0 || full {
			return nil
		}
		cursor = next
	}
}

func nodeName(node string) string {
	if node == "" {
		return "(redis)"
	}
	return node
}

// fetch reads one page of locks in one pipeline: PTTL, GET, GET key:fence,
// ZCARD key:q per key. It returns the locks and how many candidates were
// skipped as not locks.
func (r *run) fetch(ctx context.Context, rdb redis.Cmdable, node string, cands []cand) ([]Lock, int, error) {
	type cmds struct {
		cand
		pttl  *redis.Cmd // raw milliseconds: a DurationCmd overflows past ~292 years
		val   *redis.StringCmd
		fence *redis.StringCmd
		queue *redis.IntCmd
	}
	var cs []cmds
	pipe := rdb.Pipeline()
	for _, c := range cands {
		k := c.key
		cs = append(cs, cmds{
			cand:  c,
			pttl:  pipe.Do(ctx, "PTTL", k),
			val:   pipe.Get(ctx, k),
			fence: pipe.Get(ctx, policy.FenceKey(k)),
			queue: pipe.ZCard(ctx, k+fifo.QueueSuffix),
		})
	}
	_, err := pipe.Exec(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, 0, fmt.Errorf("reading locks on %s: %w", nodeName(node), err)
	}
	var locks []Lock
	skipped := 0
	for _, c := range cs {
		v, err := c.val.Result()
		if errors.Is(err, redis.Nil) {
			continue // released since the SCAN
		}
		if err != nil {
			if isWrongType(err) || isRedirect(err) {
				// Not a string (a fence.Set resource, say), or moved to
				// another master by resharding since the SCAN.
				skipped++
				continue
			}
			return nil, 0, fmt.Errorf("GET %s on %s: %w", c.key, nodeName(node), err)
		}
		l := Lock{Domain: c.d.Name, Key: c.key, Params: map[string]any{}, Node: node, params: c.ps}
		for _, p := range c.ps {
			l.Params[p.Name] = p.Value()
		}
		tok, h, ok := holder.Decode(v)
		l.Token = tok
		if !h.IsZero() {
			l.Holder = &Holder{Host: h.Host, PID: h.PID, Owner: h.Owner, TraceID: h.TraceID}
		}
		if !ok {
			l.Problem = "value is not a lease token with a holder description: " + strconv.Quote(truncate(v, 80))
		}
		switch ttl, err := c.pttl.Int64(); {
		case err != nil:
			return nil, 0, fmt.Errorf("PTTL %s on %s: %w", c.key, nodeName(node), err)
		case ttl == -2:
			continue // expired since the GET
		case ttl < 0:
			l.TTLMillis = -1
			l.Problem = join(l.Problem, "no expiry")
		default:
			l.TTLMillis = ttl
		}
		if !utf8.ValidString(c.key) {
			l.KeyBase64 = base64.StdEncoding.EncodeToString([]byte(c.key))
		}
		switch fs, err := c.fence.Result(); {
		case errors.Is(err, redis.Nil):
		case err != nil && isWrongType(err):
			l.Problem = join(l.Problem, "fence key is not a string")
		case err != nil:
			return nil, 0, fmt.Errorf("GET %s on %s: %w", policy.FenceKey(c.key), nodeName(node), err)
		default:
			if n, err := strconv.ParseInt(fs, 10, 64); err == nil {
				l.Fence = &n
			} else {
				l.Problem = join(l.Problem, "fence is not a number: "+strconv.Quote(truncate(fs, 40)))
			}
		}
		switch q, err := c.queue.Result(); {
		case err != nil && isWrongType(err):
			l.Problem = join(l.Problem, "queue key is not a sorted set")
		case err != nil:
			return nil, 0, fmt.Errorf("ZCARD %s on %s: %w", c.key+fifo.QueueSuffix, nodeName(node), err)
		default:
			l.Queue = q
		}
		locks = append(locks, l)
	}
	if err := readWaiters(ctx, rdb, node, locks); err != nil {
		return nil, 0, err
	}
	return locks, skipped, nil
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && len(re.Error()) >= 9 && re.Error()[:9] == "WRONGTYPE"
}

func isRedirect(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	m := re.Error()
	return len(m) > 6 && (m[:6] == "MOVED " || m[:4] == "ASK ")
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
