// Command lockkit is lockkit's operator tool. Its subcommand inspect lists
// the live locks of a schema's domains in Redis: for each lock its key and
// decoded parameters, its holder (host, pid, owner name and trace id when
// the runtime recorded them; else the lease token), the TTL left, the fence
// and the FIFO queue length.
//
//	go install github.com/lockkit/lockkit/cmd/lockkit@latest
//	REDIS_URL=redis://127.0.0.1:6379 lockkit inspect -config lockkit.yaml
//
// inspect is read-only (SCAN, GET, PTTL, ZCARD, and TIME, ZRANGE, HMGET for
// FIFO waiters; never KEYS) and bounded by -limit and -timeout; on a Cluster
// it scans every master. watch streams a key's or a domain's holder changes
// by polling; release -force takes a lock from its holder, fencing it out
// (docs/tools.md). Run `lockkit <command> -h` for every option.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/lockkit/lockkit/internal/inspect"
	"github.com/lockkit/lockkit/schema"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // Redis or the schema failed
	exitUsage = 2 // the command line is wrong
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const topUsage = `usage: lockkit <command> [options]

Commands:
  inspect   list the live locks of a schema's domains in Redis, with FIFO waiters
  watch     stream the holder changes of a lock key or a domain
  release   take a lock away from its holder (-force), fencing it out

Run "lockkit <command> -h" for its options.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	switch args[0] {
	case "inspect":
		return runInspect(ctx, args[1:], getenv, stdout, stderr)
	case "watch":
		return runWatch(ctx, args[1:], getenv, stdout, stderr)
	case "release":
		return runRelease(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "lockkit: unknown command %q\n\n%s", args[0], topUsage)
	return exitUsage
}

const inspectUsage = `usage: lockkit inspect [-config lockkit.yaml] [address] [filters] [output]

Lists the live locks of each domain of the schema: the key and its decoded
parameters, the holder, the TTL left, the fence and the FIFO queue length.
Read-only (SCAN, GET, PTTL and ZCARD; never KEYS) and bounded by -limit and
-timeout; on a Cluster every master is scanned.

Address (one of them; default: the REDIS_URL environment variable):
  -redis-url URL         redis://[user:password@]host:port[/db], or rediss:// for TLS
  -sentinel ADDR,ADDR    Sentinel addresses, with -master NAME
  -cluster ADDR,ADDR     Redis Cluster seed addresses
  With -sentinel and -cluster, REDIS_USERNAME and REDIS_PASSWORD are the
  data nodes' credentials.

Filters:
  -domain NAME           only this domain's locks
  -param NAME=VALUE      only locks whose parameter NAME is VALUE (repeatable;
                         an integer parameter compares as a number)
  -orphans               list instead the fence counters (key:fence) whose lock
                         key does not exist: left by locks no longer held, they
                         never expire (SCAN, EXISTS and GET)

Output:
  -json                  JSON instead of a table (one line per refresh with -watch)
  -watch DURATION        refresh every DURATION until interrupted
  -count N               with -watch, stop after N refreshes (0: no end)
  -limit N               list at most N locks (default 1000)
  -timeout DURATION      give up scanning after DURATION, per refresh (default 5s)

Exit status: 0 listed (complete or not: the last line says), 1 Redis or the
schema failed, 2 the command line is wrong.
`

// params is the repeatable -param flag.
type params map[string]string

func (p params) String() string {
	var s []string
	for k, v := range p {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (p params) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	if _, dup := p[k]; dup {
		return fmt.Errorf("parameter %s given twice", k)
	}
	p[k] = v
	return nil
}

// addrFlags are the schema and address flags every command takes.
type addrFlags struct {
	config, redisURL, sentinel, master, cluster string
}

func (a *addrFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.config, "config", "lockkit.yaml", "")
	fs.StringVar(&a.redisURL, "redis-url", "", "")
	fs.StringVar(&a.sentinel, "sentinel", "", "")
	fs.StringVar(&a.master, "master", "", "")
	fs.StringVar(&a.cluster, "cluster", "", "")
}

type inspectFlags struct {
	addrFlags
	domain         string
	params         params
	json, orphans  bool
	watch, timeout time.Duration
	count, limit   int
}

func runInspect(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f := inspectFlags{params: params{}}
	fs := flag.NewFlagSet("lockkit inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	fs.StringVar(&f.domain, "domain", "", "")
	fs.Var(f.params, "param", "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.BoolVar(&f.orphans, "orphans", false, "")
	fs.DurationVar(&f.watch, "watch", 0, "")
	fs.IntVar(&f.count, "count", 0, "")
	fs.IntVar(&f.limit, "limit", inspect.DefaultLimit, "")
	fs.DurationVar(&f.timeout, "timeout", inspect.DefaultTimeout, "")
	usage := usageFunc("inspect", inspectUsage, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, inspectUsage)
			return exitOK
		}
		return usage("%v", err)
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q (options come as -name value)", fs.Arg(0))
	}
	switch {
	case f.limit <= 0:
		return usage("-limit must be > 0 (got %d)", f.limit)
	case f.timeout <= 0:
		return usage("-timeout must be > 0 (got %v)", f.timeout)
	case f.watch < 0:
		return usage("-watch must be > 0 (got %v)", f.watch)
	case f.count < 0:
		return usage("-count must be >= 0 (got %d)", f.count)
	case f.count > 0 && f.watch == 0:
		return usage("-count needs -watch")
	}
	rdb, in, code := open("inspect", f.addrFlags, getenv, stderr, usage)
	if rdb == nil {
		return code
	}
	defer rdb.Close()
	opts := inspect.Options{Domain: f.domain, Params: f.params, Limit: f.limit, Timeout: f.timeout, Orphans: f.orphans}
	glob, err := in.Glob(opts)
	if err != nil {
		return usage("%v", err)
	}

	for i := 1; ; i++ {
		code = once(ctx, in, rdb, opts, f, glob, stdout, stderr)
		if f.watch == 0 || f.count > 0 && i >= f.count {
			return code
		}
		select {
		case <-ctx.Done():
			return code
		case <-time.After(f.watch):
		}
	}
}

// once lists the locks one time and prints them.
func once(ctx context.Context, in *inspect.Inspector, rdb redis.UniversalClient, opts inspect.Options, f inspectFlags, glob string, stdout, stderr io.Writer) int {
	rep, err := in.Inspect(ctx, rdb, opts)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK // interrupted
		}
		fmt.Fprintf(stderr, "lockkit inspect: %s (SCAN MATCH %s): %v\n", where(f.addrFlags, rdb), glob, err)
		return exitError
	}
	if f.json {
		err = inspect.WriteJSON(stdout, rep, f.watch > 0)
	} else {
		if f.watch > 0 {
			fmt.Fprintf(stdout, "--- %s  %s\n", time.Now().UTC().Format(time.RFC3339), where(f.addrFlags, rdb))
		}
		err = inspect.WriteTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockkit inspect: writing the output: %v\n", err)
		return exitError
	}
	return exitOK
}

// usageFunc returns the function that reports a wrong command line of
// command cmd, with its usage text, and returns exitUsage.
func usageFunc(cmd, text string, stderr io.Writer) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "lockkit "+cmd+": "+format+"\n\n%s", append(a, text)...)
		return exitUsage
	}
}

// open connects and loads the schema. On failure it returns a nil client and
// the exit code, having said why.
func open(cmd string, f addrFlags, getenv func(string) string, stderr io.Writer, usage func(string, ...any) int) (redis.UniversalClient, *inspect.Inspector, int) {
	rdb, err := connect(f, getenv)
	if err != nil {
		return nil, nil, usage("%v", err)
	}
	file, err := schema.Load(f.config)
	if err != nil {
		rdb.Close()
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, nil, usage("reading the schema: %v (set -config)", err)
		}
		fmt.Fprintf(stderr, "lockkit %s: the schema %s has problems:\n%v\n", cmd, f.config, err)
		return nil, nil, exitError
	}
	return rdb, inspect.New(file), exitOK
}

// where names the Redis deployment for messages, without credentials.
func where(f addrFlags, rdb redis.UniversalClient) string {
	switch {
	case f.cluster != "":
		return "cluster " + f.cluster
	case f.sentinel != "":
		return "sentinel " + f.sentinel + " master " + f.master
	}
	if c, ok := rdb.(*redis.Client); ok {
		return "redis " + c.Options().Addr
	}
	return "redis"
}

// connect builds the client for the address flags, REDIS_URL by default.
func connect(f addrFlags, getenv func(string) string) (redis.UniversalClient, error) {
	n := 0
	for _, s := range []string{f.redisURL, f.sentinel, f.cluster} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("give one address: -redis-url, -sentinel or -cluster")
	}
	if f.master != "" && f.sentinel == "" {
		return nil, errors.New("-master goes with -sentinel")
	}
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch {
	case f.sentinel != "":
		if f.master == "" {
			return nil, errors.New("-sentinel needs -master NAME, the name the sentinels monitor")
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            f.master,
			SentinelAddrs:         split(f.sentinel),
			Username:              getenv("REDIS_USERNAME"),
			Password:              getenv("REDIS_PASSWORD"),
			DialTimeout:           2 * time.Second,
			DisableIdentity:       true,
			ContextTimeoutEnabled: true,
		}), nil
	case f.cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                    split(f.cluster),
			Username:                 getenv("REDIS_USERNAME"),
			Password:                 getenv("REDIS_PASSWORD"),
			DialTimeout:              2 * time.Second,
			DisableIdentity:          true,
			ContextTimeoutEnabled:    true,
			MaintNotificationsConfig: off,
		}), nil
	}
	u, from := f.redisURL, "-redis-url"
	if u == "" {
		u, from = getenv("REDIS_URL"), "REDIS_URL"
	}
	if u == "" {
		return nil, errors.New("no Redis address: set REDIS_URL, or give -redis-url, -sentinel or -cluster")
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", from, err)
	}
	o.DisableIdentity = true
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = off
	if o.DialTimeout == 0 {
		o.DialTimeout = 2 * time.Second
	}
	return redis.NewClient(o), nil
}

func split(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
