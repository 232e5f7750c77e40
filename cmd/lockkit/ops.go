package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/lockkit/lockkit/internal/inspect"
)

const watchUsage = `usage: lockkit watch [-config lockkit.yaml] [address] [options] KEY|DOMAIN

Streams the holder changes of one lock key, or of every lock of a domain,
one line each: held (at the start), acquired, released, expired and
handover (a FIFO lock passed to its next waiter), with the holder and the
fence. It polls (PTTL, GET, GET key:fence, ZCARD for a key; a full inspect
scan for a domain) every -interval and compares: a lock taken and let go
within one interval is not seen. Read-only.

Address: as for inspect (-redis-url, -sentinel with -master, -cluster;
default REDIS_URL).

Options:
  -param NAME=VALUE      with DOMAIN, only locks whose parameter NAME is VALUE (repeatable)
  -interval DURATION     time between polls (default 100ms, at least 10ms)
  -count N               stop after N changes (held lines do not count; 0: no end)
  -for DURATION          stop after DURATION (0: no end)
  -json                  one JSON object per line
  -limit N, -timeout D   bounds of each domain scan, as for inspect

Exit status: 0 stopped (-count, -for or interrupted), 1 Redis or the schema
failed, 2 the command line is wrong (a KEY|DOMAIN that names no domain and is
no lock key of the schema, among others).
`

func runWatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var a addrFlags
	ps := params{}
	var asJSON bool
	var interval, timeout, dur time.Duration
	var count, limit int
	fs := flag.NewFlagSet("lockkit watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.register(fs)
	fs.Var(ps, "param", "")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.DurationVar(&interval, "interval", inspect.DefaultInterval, "")
	fs.DurationVar(&dur, "for", 0, "")
	fs.IntVar(&count, "count", 0, "")
	fs.IntVar(&limit, "limit", inspect.DefaultLimit, "")
	fs.DurationVar(&timeout, "timeout", inspect.DefaultTimeout, "")
	usage := usageFunc("watch", watchUsage, stderr)
	target, code, done := parseWithArg(fs, args, stdout, watchUsage, usage)
	if done {
		return code
	}
	switch {
	case target == "":
		return usage("give the KEY or DOMAIN to watch")
	case interval < inspect.MinInterval:
		return usage("-interval must be at least %v (got %v)", inspect.MinInterval, interval)
	case count < 0:
		return usage("-count must be >= 0 (got %d)", count)
	case dur < 0:
		return usage("-for must be >= 0 (got %v)", dur)
	case limit <= 0:
		return usage("-limit must be > 0 (got %d)", limit)
	case timeout <= 0:
		return usage("-timeout must be > 0 (got %v)", timeout)
	}
	rdb, in, code := open("watch", a, getenv, stderr, usage)
	if rdb == nil {
		return code
	}
	defer rdb.Close()
	o := inspect.WatchOptions{Interval: interval, Options: inspect.Options{Limit: limit, Timeout: timeout, Params: ps}}
	if _, err := in.Glob(inspect.Options{Domain: target}); err == nil {
		o.Domain = target
	} else if _, err := in.Domain(target); err == nil {
		if len(ps) > 0 {
			return usage("-param goes with a DOMAIN, not a KEY")
		}
		o.Key = target
	} else {
		return usage("%q is neither a domain of %s nor a lock key of it: %v", target, a.config, err)
	}
	if _, err := in.Glob(o.Options); err != nil {
		return usage("%v", err)
	}
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	n := 0
	var werr error
	err := in.Watch(ctx, rdb, o, func(e inspect.Event) bool {
		if asJSON {
			werr = writeJSONLine(stdout, e)
		} else {
			_, werr = fmt.Fprintln(stdout, eventText(e))
		}
		if werr != nil {
			return false
		}
		if e.Event != inspect.EventHeld {
			n++
		}
		return count == 0 || n < count
	})
	if werr != nil {
		fmt.Fprintf(stderr, "lockkit watch: writing the output: %v\n", werr)
		return exitError
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockkit watch: %s: %v\n", where(a, rdb), err)
		return exitError
	}
	return exitOK
}

// eventText is one event for people.
func eventText(e inspect.Event) string {
	s := fmt.Sprintf("%s %-8s %s %s", e.Time.Format("15:04:05.000"), e.Event, e.Key, who(e.Token, e.Holder))
	s += " fence " + fenceText(e.Fence)
	if e.From != nil {
		s += " from " + who(e.From.Token, e.From.Holder) + " fence " + fenceText(e.From.Fence)
	}
	return s
}

func who(token string, h *inspect.Holder) string {
	s := "token " + token
	if h != nil {
		if h.Owner != "" {
			s += " " + h.Owner + "@"
		} else {
			s += " "
		}
		s += h.Host
		if h.PID != 0 {
			s += ":" + strconv.Itoa(h.PID)
		}
		if h.TraceID != "" {
			s += " trace " + h.TraceID
		}
	}
	return s
}

func fenceText(f *int64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatInt(*f, 10)
}

func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// parseWithArg parses flags given before or after one positional argument.
func parseWithArg(fs *flag.FlagSet, args []string, stdout io.Writer, help string, usage func(string, ...any) int) (arg string, code int, done bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, help)
				return "", exitOK, true
			}
			return "", usage("%v", err), true
		}
		if fs.NArg() == 0 {
			return arg, 0, false
		}
		if arg != "" {
			return "", usage("unexpected argument %q (give one KEY)", fs.Arg(0)), true
		}
		arg, args = fs.Arg(0), fs.Args()[1:]
	}
}

const releaseUsage = `usage: lockkit release -force [-no-fence-ok] [-config lockkit.yaml] [address] [options] KEY

Takes the lock KEY away from its holder. On a fencing domain it first issues
the next fence (max(counter+1, server µs), the runtime's rule), in the same
Lua script that checks the holder it read and deletes the lock, so every later
holder's fence is above the old holder's and fence.Set and fence.Table
reject the old holder's writes. On a FIFO domain the lock is released by
lockkit's own FIFO release script and handed over to the next waiter. The
old holder sees ErrLockLost at its next renewal. Prints the old holder, the
old fence and the new fence.

Address: as for inspect (-redis-url, -sentinel with -master, -cluster;
default REDIS_URL).

Options:
  -force           required: says you mean to take the lock away
  -no-fence-ok     release a lock of a domain without fencing: the old
                   holder's writes cannot be rejected and it may keep
                   writing until its next renewal
  -token TOKEN     only if the lock is still held by this lease token
  -json            print the result as JSON
  -timeout D       bound on the whole command (default 5s)

Exit status: 0 released, 1 not held (or Redis or the schema failed), 2 the
command line is wrong (no -force, a key no domain produces, a domain without
fencing and no -no-fence-ok).
`

func runRelease(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var a addrFlags
	var force, noFence, asJSON bool
	var token string
	var timeout time.Duration
	fs := flag.NewFlagSet("lockkit release", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.register(fs)
	fs.BoolVar(&force, "force", false, "")
	fs.BoolVar(&noFence, "no-fence-ok", false, "")
	fs.StringVar(&token, "token", "", "")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.DurationVar(&timeout, "timeout", inspect.DefaultTimeout, "")
	usage := usageFunc("release", releaseUsage, stderr)
	key, code, done := parseWithArg(fs, args, stdout, releaseUsage, usage)
	if done {
		return code
	}
	switch {
	case !force:
		return usage("release takes a lock away from its holder; say so with -force")
	case key == "":
		return usage("give the KEY to release")
	case timeout <= 0:
		return usage("-timeout must be > 0 (got %v)", timeout)
	}
	rdb, in, code := open("release", a, getenv, stderr, usage)
	if rdb == nil {
		return code
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := in.ForceRelease(ctx, rdb, key, inspect.ForceOptions{NoFenceOK: noFence, Token: token})
	switch {
	case errors.Is(err, inspect.ErrNotLockKey):
		return usage("%v", err)
	case errors.Is(err, inspect.ErrNoFencing):
		return usage("%v (-no-fence-ok)", err)
	case err != nil && f == nil:
		fmt.Fprintf(stderr, "lockkit release: %s: %v\n", where(a, rdb), err)
		return exitError
	case err != nil:
		// The fence was issued but the release did not finish.
		fmt.Fprintf(stderr, "lockkit release: %s: %v\n", where(a, rdb), err)
		code = exitError
	}
	if asJSON {
		if err := writeJSONLine(stdout, f); err != nil {
			return exitError
		}
		return code
	}
	fmt.Fprintf(stdout, "released %s (domain %s) from %s\n", f.Key, f.Domain, who(f.Token, f.Holder))
	if f.Fencing {
		fmt.Fprintf(stdout, "fence: %s -> %d (the old holder's fenced writes are rejected once a later holder has written)\n", fenceText(f.OldFence), f.NewFence)
	} else {
		fmt.Fprintf(stdout, "fence: none (domain %s does not fence: the old holder's writes are not rejected)\n", f.Domain)
	}
	if h := f.HandedTo; h != nil {
		fmt.Fprintf(stdout, "handed over to %s fence %d\n", who(h.Token, h.Holder), h.Fence)
	}
	return code
}
