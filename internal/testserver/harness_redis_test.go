package testserver

import "testing"

// A promoted replica that forgot --replicaof comes back from Restart as a
// primary.
func TestForgetReplicaOf(t *testing.T) {
	primary := StartRedis(t)
	replica := StartReplica(t, primary)
	if err := replica.Client(t).ReplicaOf(t.Context(), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	replica.ForgetReplicaOf(t)
	replica.Restart(t)
	if role := replica.Info(t, "replication")["role"]; role != "master" {
		t.Fatalf("role after Restart = %q, want master", role)
	}
}
