package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// DoAll on PostgreSQL: advisory locks taken in the canonical order are
// deadlock-free too. 4 clients × 4 goroutines move money between 3 accounts
// in random directions and argument orders; the total is conserved, no two
// sections overlap on an account, and the run finishes. A set whose second
// lock is held is given back whole.
func TestDoAllOnPostgres(t *testing.T) {
	pg := startPG(t)
	const clients, perCl, rounds, accounts = 4, 4, 16, 3
	p := lockkit.Policy{TTL: 5 * time.Second, Retry: retry}
	var (
		balances [accounts]atomic.Int64
		inside   [accounts]atomic.Int32
		overlaps atomic.Int32
		wg       sync.WaitGroup
		errs     = make(chan error, clients*perCl)
	)
	for i := range balances {
		balances[i].Store(1000)
	}
	for range clients {
		c := newClient(t, testserver.PgxPool(t, pg.DSN(), 6), postgres.WithMaxHeld(4), postgres.WithConnWait(5*time.Second))
		for range perCl {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			wg.Go(func() {
				for range rounds {
					from := rng.IntN(accounts)
					to := (from + 1 + rng.IntN(accounts-1)) % accounts
					a, b := lockOf(c, "account", p, strconv.Itoa(from)), lockOf(c, "account", p, strconv.Itoa(to))
					if rng.IntN(2) == 0 {
						a, b = b, a
					}
					err := lockkit.DoAll(ctxT(t, 60*time.Second), func(ctx context.Context, s *lockkit.LeaseSet) error {
						for _, i := range []int{from, to} {
							if inside[i].Add(1) != 1 {
								overlaps.Add(1)
							}
							defer inside[i].Add(-1)
						}
						f, g := balances[from].Load(), balances[to].Load()
						time.Sleep(200 * time.Microsecond)
						balances[from].Store(f - 7)
						balances[to].Store(g + 7)
						return nil
					}, a, b)
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := int64(0)
	for i := range balances {
		total += balances[i].Load()
	}
	if overlaps.Load() != 0 || total != accounts*1000 {
		t.Fatalf("%d overlapping sections, total %d (want %d)", overlaps.Load(), total, accounts*1000)
	}

	// Rollback: the set's second lock (in canonical order) is held elsewhere.
	c1 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	held, err := lockOf(c2, "account", p, "b").TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	err = lockkit.TryDoAll(ctxT(t, 5*time.Second), func(context.Context, *lockkit.LeaseSet) error { return fmt.Errorf("ran") },
		lockOf(c1, "account", p, "b"), lockOf(c1, "account", p, "a"))
	if !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Fatalf("TryDoAll with its second lock held = %v, want ErrNotAcquired", err)
	}
	if err := lockOf(c2, "account", p, "a").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("the set's first lock stayed held after the set was refused: %v", err)
	}
}
