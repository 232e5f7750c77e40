package testserver

import "testing"

// ForgetReplicaOf drops --replicaof from the arguments Restart uses, for a
// replica that Sentinel promoted: restarted, it comes back as a primary (as
// its rewritten config would say), not as a replica of the old primary.
func (r *Redis) ForgetReplicaOf(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	args := make([]string, 0, len(r.args))
	for i := 0; i < len(r.args); i++ {
		if r.args[i] == "--replicaof" && i+2 < len(r.args) {
			i += 2
			continue
		}
		args = append(args, r.args[i])
	}
	r.args = args
}
