// Package schema reads lockkit.yaml, the file that declares an application's
// lock domains, into a checked model for the generator (lockkit-gen).
//
// docs/schema.md shows a file with every field, annotated (the one copy,
// which a test checks against internal/policy's declaration of the policy
// fields); lockkit.schema.json describes each field too.
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
// (the default 50ms too, when replicas > 0), any other policy field that
// breaks its rule, alone or against the ttl (docs/schema.md), names and Go
// names that are malformed, duplicated or collide with the generated code,
// malformed patterns, and descriptions holding a character their doc comment must not
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
