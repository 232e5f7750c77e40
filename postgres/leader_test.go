package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// Leader names no term whose lease has ended. The leader's session is
// paused (SIGSTOP of its server process): it keeps the advisory lock, so no
// candidate can be granted, but its holder's lease ends at its deadline
// (fn is told). Leader named that term for as long as the pause lasted
// (2.7s after the deadline in an attack review); it now reads the lease
// record too, and a lock held past its record leads nobody.
func TestLeaderNamesNoEndedTerm(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	p := lockkit.Policy{TTL: 2 * time.Second, Kind: "election"}
	election := func(c *lockkit.Client) lockkit.Election {
		return c.Domain(lockkit.DomainSpec{Name: "el", Policy: p}).Key(32).Literal("el:").String("x").Election()
	}
	ea := election(newClient(t, testserver.PgxPool(t, pg.DSN(), 3)))
	observer := election(newClient(t, testserver.PgxPool(t, pg.DSN(), 3)))
	ctx := ctxT(t, 30*time.Second)

	type term struct {
		lease *lockkit.Lease
		num   int64
	}
	in := make(chan term, 1)
	told := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- ea.Lead(ctx, func(fctx context.Context, tm *lockkit.Term) error {
			in <- term{tm.Lease(), tm.Number()}
			<-fctx.Done()
			told <- context.Cause(fctx)
			return nil
		})
	}()
	a := <-in
	if ld, err := observer.Leader(ctx); err != nil || ld.Term != a.num {
		t.Fatalf("Leader while A leads = %+v, %v; want term %d", ld, err, a.num)
	}
	resume := pg.PauseBackend(t, holderPID(t, admin, a.lease.Key()))
	defer resume()
	select {
	case cause := <-told:
		if !errors.Is(cause, lockkit.ErrLockLost) {
			t.Fatalf("A's fn was told %v, want ErrLockLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("A's fn was not told its term ended")
	}
	// The record expires at the server's grant or extend time + TTL, a
	// little after A's local deadline (drift, the round trip): read until
	// it has, within a TTL.
	var ld lockkit.Leader
	var err error
	for end := time.Now().Add(p.TTL); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ld, err = observer.Leader(ctx); err == nil && ld.Term != a.num {
			break
		}
	}
	if err != nil || ld.Term == a.num {
		t.Errorf("Leader = %+v, %v, %v after A's term ended: it names the ended term %d", ld, err, time.Since(a.lease.Deadline()).Round(time.Millisecond), a.num)
	}
	if ld.Term != 0 {
		t.Errorf("Leader = %+v: nobody can be granted while A's paused session holds the lock", ld)
	}
	resume()
	if err := <-done; !errors.Is(err, lockkit.ErrLockLost) {
		t.Errorf("A's Lead = %v, want ErrLockLost", err)
	}
}
