package lockkit

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
)

// replicaPolicy waits for one replica for up to 50ms.
func replicaPolicy() Policy {
	return Policy{TTL: 5 * time.Second, Replicas: 1, ReplicaTimeout: 50 * time.Millisecond}
}

// wantReplicaFailure checks that err is an acquisition refused because too
// few replicas acknowledged, reported as ErrUnavailable, not contention.
func wantReplicaFailure(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) || !errors.Is(err, rediswire.ErrReplicas) {
		t.Fatalf("acquire = %v, want ErrUnavailable for too few replicas", err)
	}
	if want := "too few replicas acknowledged the lock: 0 of 1 within 50ms; the lock was released"; !strings.Contains(err.Error(), want) {
		t.Fatalf("acquire = %v, want it to say %q", err, want)
	}
}

// A primary with no replica cannot satisfy replicas: 1. The acquisition fails
// with ErrUnavailable saying so, within about the replica timeout, and the
// key it wrote is gone.
func TestReplicaNoneConnected(t *testing.T) {
	r := testserver.StartRedis(t)
	l := lockOn(testDomain(t, newClient(t, r), replicaPolicy()), "x")
	start := time.Now()
	lease, err := l.TryAcquire(t.Context())
	el := time.Since(start)
	if lease != nil {
		t.Fatal("granted a lease no replica acknowledged")
	}
	wantReplicaFailure(t, err)
	if el < 50*time.Millisecond || el > time.Second {
		t.Fatalf("refusal took %v, want about the 50ms replica timeout", el)
	}
	if n := r.Client(t).Exists(t.Context(), l.Key()).Val(); n != 0 {
		t.Fatal("the refused acquisition left its key on the primary")
	}
}

// With a replica attached the lease is granted, and the replica holds the
// lock by the time the lease is handed out: WAIT returned only after it
// acknowledged the write. When the replica is frozen (SIGSTOP), WAIT times
// out, the acquisition fails and the key is deleted; once it is thawed,
// acquisitions succeed again.
func TestReplicaWait(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartReplica(t, primary)
	replicasInSync(t, primary, 1)
	c := newClient(t, primary)
	d := testDomain(t, c, replicaPolicy())
	onReplica := replica.Client(t)

	for i := range 20 {
		l := lockOn(d, "k"+strconv.Itoa(i))
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("acquisition %d with a live replica: %v", i, err)
		}
		// Read the replica at once: no polling. The WAIT guarantees it.
		if got, err := onReplica.Get(t.Context(), l.Key()).Result(); err != nil || !holder.Owns(got, lease.Token()) {
			t.Fatalf("acquisition %d: replica has %q (%v), want the lease's token: WAIT returned before the replica had it", i, got, err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	replica.Pause(t)
	l := lockOn(d, "frozen")
	lease, err := l.TryAcquire(t.Context())
	if lease != nil {
		t.Fatal("granted a lease the frozen replica did not acknowledge")
	}
	wantReplicaFailure(t, err)
	if n := primary.Client(t).Exists(t.Context(), l.Key()).Val(); n != 0 {
		t.Fatal("the refused acquisition left its key on the primary")
	}
	replica.Resume(t)

	// Thawed: the replica catches up and acknowledges again.
	var lastErr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if lease, lastErr = l.TryAcquire(t.Context()); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("after the replica resumed: %v", lastErr)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// On a Cluster the WAIT goes to the master that owns the key. The helper's
// cluster has no replicas, so every acquisition with replicas: 1 fails with
// the replica error, on every master, and leaves no key behind; without
// replicas the same keys are granted.
func TestReplicaWaitCluster(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	// A generous command timeout: the refusal under test is WAIT's, and a
	// slow reply on a loaded machine must not pass for it or hide it.
	c := newClientOver(t, cc, WithCommandTimeout(3*time.Second))
	d := testDomain(t, c, replicaPolicy())
	plain := testDomain(t, newClientOver(t, cc, WithCommandTimeout(3*time.Second)), Policy{TTL: 5 * time.Second})
	masters := map[string]bool{}
	for i := 0; len(masters) < 3; i++ {
		if i > 1000 {
			t.Fatalf("keys reached only masters %v", masters)
		}
		l := lockOn(d, "r"+strconv.Itoa(i))
		m, err := cc.MasterForKey(t.Context(), l.Key())
		if err != nil {
			t.Fatal(err)
		}
		if masters[m.Options().Addr] {
			continue
		}
		masters[m.Options().Addr] = true
		_, err = l.TryAcquire(t.Context())
		wantReplicaFailure(t, err)
		if n, err := cc.Exists(t.Context(), l.Key()).Result(); err != nil || n != 0 {
			t.Fatalf("master %s: refused acquisition left its key (%d, %v)", m.Options().Addr, n, err)
		}
		lease, err := lockOn(plain, "r"+strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("master %s without replicas: %v", m.Options().Addr, err)
		}
		lease.Release(t.Context())
	}
}

// replicasInSync waits (up to 10s) until a write on primary reaches n
// replicas. A replica that reports master_link_status:up may still not get
// the primary's stream for up to a second (Redis 7.0 after a diskless sync
// puts the replica online only on its first REPLCONF ACK, sent once a
// second), and the tests must not measure that.
func replicasInSync(t *testing.T, primary *testserver.Redis, n int) {
	t.Helper()
	rdb := primary.Client(t)
	defer rdb.Close()
	var acked int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err := rdb.Set(t.Context(), "replicas-in-sync", time.Now().String(), 0).Err(); err != nil {
			t.Fatal(err)
		}
		var err error
		if acked, err = rdb.Do(t.Context(), "wait", n, 100).Int64(); err != nil {
			t.Fatal(err)
		}
		if acked >= int64(n) {
			rdb.Del(t.Context(), "replicas-in-sync")
			return
		}
	}
	t.Fatalf("only %d of %d replicas acknowledge writes 10s after they linked up", acked, n)
}

// The history of issue 32: under replicas: 1 the replication link stalls
// after a grant (the replica is frozen), and the holder extends. The extend
// reaches the primary alone, so it must count as failed (ErrUnavailable,
// too few replicas) and the local deadline must stay where it was: after a
// failover to that replica the key expires at the old deadline, and a lease
// that moved past it would overlap the next holder's. Once the replica is
// back, an extend moves the deadline again.
func TestReplicaExtendWaits(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartReplica(t, primary)
	replicasInSync(t, primary, 1)
	p := replicaPolicy()
	p.Renew = -1 // extends are the test's own
	d := testDomain(t, newClient(t, primary), p)
	lease, err := lockOn(d, "x").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(t.Context())

	replica.Pause(t)
	before := lease.Deadline()
	time.Sleep(20 * time.Millisecond) // a moved deadline would differ
	err = lease.Extend(t.Context())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, rediswire.ErrReplicas) {
		t.Errorf("extend with the replica frozen = %v, want ErrUnavailable for too few replicas", err)
	}
	if after := lease.Deadline(); !after.Equal(before) {
		t.Errorf("the deadline moved by %v on an extend only the primary acknowledged", after.Sub(before))
	}
	if lease.Err() != nil {
		t.Fatalf("a failed extend lost the lease: %v", lease.Err())
	}
	replica.Resume(t)

	var lastErr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if lastErr = lease.Extend(t.Context()); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("extend after the replica resumed: %v", lastErr)
	}
	if !lease.Deadline().After(before) {
		t.Fatal("an extend both nodes acknowledged did not move the deadline")
	}
}
