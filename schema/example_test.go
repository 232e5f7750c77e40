package schema_test

import (
	"fmt"

	"github.com/lockkit/lockkit/schema"
)

func ExampleParse() {
	src := `version: 1
package: locks
defaults:
  ttl: 10s
  retry: {attempts: 5, initial: 50ms, max: 1s}
domains:
  - pattern: "table:{id}"
    fencing: true
  - pattern: "user:{id:int64}:digest"
    ttl: 30s
    retry: none
`
	f, err := schema.Parse("lockkit.yaml", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range f.Domains {
		fmt.Printf("%s %s %q ttl=%v attempts=%d fencing=%v params=%v\n",
			d.Name, d.GoName, d.Pattern, d.TTL, d.Retry.Attempts, d.Fencing, d.Params())
	}
	// Output:
	// table Table "table:{id}" ttl=10s attempts=5 fencing=true params=[{ id string}]
	// user_digest UserDigest "user:{id:int64}:digest" ttl=30s attempts=1 fencing=false params=[{ id int64}]
}

func ExampleParse_errors() {
	src := `version: 1
package: locks
domains:
  - pattern: "user:{id}"
    ttl: 0s
  - pattern: "user:{name}"
    name: user_by_name
    ttl: 5s
    tll: 5s
`
	_, err := schema.Parse("lockkit.yaml", []byte(src))
	fmt.Println(err)
	// Output:
	// lockkit.yaml:5:10: domain "user": ttl must be > 0 (got 0s)
	// lockkit.yaml:6:14: domain "user_by_name": pattern "user:{name}" can produce the same key as domain "user" (line 4, pattern "user:{id}"), e.g. "lock:{user:a}"; change the literal parts so that no key fits both
	// lockkit.yaml:9:5: domain "user_by_name": unknown key "tll" (did you mean "ttl"?); valid keys: pattern, name, go_name, description, ttl, renew, retry, fencing, replicas, replica_timeout, wait, max_hold, kind, permits
}
