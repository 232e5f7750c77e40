// Package schema reads lockkit.yaml, the file that declares an application's
// lock domains, into a checked model for the generator (lockkit-gen).
//
// A file, every field shown (lockkit.schema.json describes each one too):
//
//	# yaml-language-server: $schema=./schema/lockkit.schema.json
//	version: 1                 # required; the only version
//	package: locks             # required; Go package name of the generated file
//	prefix: "lock:"            # key prefix; default "lock:"; no braces
//	defaults:                  # optional; for every domain that does not set its own
//	  ttl: 10s                 # lease lifetime: a Go duration > 0, whole milliseconds
//	  renew: 3s                # renewal interval < ttl, or none; default ttl/3
//	  retry:                   # none (one attempt, the default) or a backoff:
//	    attempts: 5            #   total attempts, >= 1 (required in a retry mapping,
//	                           #   here or in defaults)
//	    initial: 50ms          #   first backoff, > 0; default 50ms
//	    max: 1s                #   cap on one backoff, >= initial; default 1s
//	    multiplier: 2          #   growth, >= 1; default 2
//	    jitter: 0.5            #   randomization, above 0, at most 1; default 0.5
//	    max_wait: 5s           #   bound on the whole acquisition, 0s for none; default 0s
//	  fencing: false           # issue fencing numbers; default false
//	  replicas: 1              # replicas that must hold the lock (Redis WAIT) before
//	                           #   a lease is granted, >= 0; default 0: do not wait
//	  replica_timeout: 50ms    # bound on that wait: > 0, whole milliseconds, < ttl;
//	                           #   only with replicas > 0; default 50ms
//	domains:                   # required, at least one
//	  - pattern: "table:{id}"  # required; literals and typed parameters
//	    name: table            # [a-z][a-z0-9_]*; default: the pattern's literal words, joined by _
//	    go_name: Table         # exported Go name; default: the CamelCase of name
//	    description: A table being booked.  # the doc comment
//	    ttl: 10s               # and renew, retry, fencing, replicas,
//	                           #   replica_timeout: as in defaults
//
// A domain's retry mapping takes the fields it leaves out from defaults.retry
// (then from the built-in values); retry: none on a domain means one attempt
// whatever the defaults say. Likewise replicas: 0 on a domain means no wait
// for replicas, whatever the defaults say (their replica_timeout then has no
// effect); replica_timeout on a domain needs replicas > 0, its own or from
// defaults.
//
// # Patterns
//
// A pattern is literal text and parameters: {name} is a string, {name:type}
// has a type among string, int, int32, int64, uint, uint32, uint64. A
// parameter's name is an ASCII Go identifier, not a keyword, unique in its
// pattern; it becomes the parameter of the generated constructor
// ("user:{id:int64}:digest" → UserDigest(id int64)). Literals hold no braces,
// white space or control characters.
//
// # Checks
//
// Parsing is strict and reports every problem at once, each as
// "file:line:col: message" (see Errors), saying what is wrong and what would
// be right: unknown keys (with the valid ones), wrong types, missing or
// unsupported version, bad durations and retry values, renew >= ttl,
// negative replicas, replica_timeout without replicas or not shorter than ttl
// (the default 50ms too, when replicas > 0), names and Go names that are
// malformed, duplicated or collide with the generated code, malformed
// patterns, and descriptions holding a character their doc comment must not
// carry: a byte order mark (U+FEFF), a control character other than tab and
// newline, U+2028 or U+2029, or a bidirectional control (U+202A–U+202E,
// U+2066–U+2069); the error points at the character.
//
// Keys are checked exactly, with automata (see overlap.go): within a pattern,
// no key may split into parameter values in two ways ("{a}{b}", "{a}-{b}");
// across patterns, no key may fit two domains ("user:{id}" and "user:{name}",
// "job:{id}" and "job:latest"; but "user:{id}" and "user:{id}:digest", or
// "job:{id:int64}" and "job:latest", are fine). A string parameter is encoded
// without ':', '{' or '}' (the runtime escapes them), an integer as decimal.
// The simple way to keep patterns apart is a literal containing ':' between
// parameters, and distinct literal words.
package schema
