package postgres_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	os.Exit(m.Run())
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startPG starts a PostgreSQL 15 server and creates the fence table.
func startPG(t testing.TB) *testserver.Postgres {
	t.Helper()
	pg := testserver.StartPostgres(t)
	if err := postgres.Migrate(ctxT(t, 10*time.Second), testserver.PgxPool(t, pg.DSN(), 2)); err != nil {
		t.Fatal(err)
	}
	return pg
}

// newClient is a lockkit client over pool, closed with the test.
func newClient(t testing.TB, pool *pgxpool.Pool, opts ...postgres.Option) *lockkit.Client {
	t.Helper()
	c, err := lockkit.New(postgres.New(pool, opts...), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctxT(t, 5*time.Second)) })
	return c
}

func lockOf(c *lockkit.Client, name string, p lockkit.Policy, id string) lockkit.Lock {
	return c.Domain(lockkit.DomainSpec{Name: name, Policy: p}).Key(32).Literal(name + ":").String(id).Lock()
}

var retry = lockkit.Retry{Attempts: 100000, Initial: time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 1.5, Jitter: 0.5, MaxWait: 30 * time.Second}

// holderPID is the PostgreSQL backend pid that holds key's advisory lock, or 0.
func holderPID(t testing.TB, pool *pgxpool.Pool, key string) int {
	t.Helper()
	id := postgres.KeyID(key)
	var pid int
	err := pool.QueryRow(ctxT(t, 5*time.Second), `SELECT coalesce((SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid = $1::oid AND objid = $2::oid LIMIT 1), 0)`,
		uint32(uint64(id)>>32), uint32(uint64(id))).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// Mutual exclusion: 4 clients, each on its own pool, 16 goroutines each (64
// in all, goroutines of one client sharing its pool) do a non-atomic
// read-modify-write under one lock. No update is lost and no two critical
// sections overlap.
func TestMutualExclusion(t *testing.T) {
	pg := startPG(t)
	const (
		clients = 4
		perCl   = 16
		rounds  = 4
	)
	var (
		counter atomic.Int64
		inside  atomic.Int32
		overlap atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, clients*perCl)
	)
	p := lockkit.Policy{TTL: 5 * time.Second, Fencing: true, Retry: retry}
	var lastFence atomic.Int64
	for range clients {
		c := newClient(t, testserver.PgxPool(t, pg.DSN(), 5), postgres.WithMaxHeld(4), postgres.WithConnWait(5*time.Second))
		l := lockOf(c, "counter", p, "x")
		for range perCl {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := l.Do(ctxT(t, 60*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
						if inside.Add(1) != 1 {
							overlap.Add(1)
						}
						defer inside.Add(-1)
						if f := lease.Fence(); f <= lastFence.Load() {
							return fmt.Errorf("fence %d not above the previous holder's %d", f, lastFence.Load())
						} else {
							lastFence.Store(f)
						}
						v := counter.Load()
						time.Sleep(200 * time.Microsecond)
						counter.Store(v + 1)
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlap.Load(); n > 0 {
		t.Errorf("%d critical sections overlapped another", n)
	}
	if got, want := counter.Load(), int64(clients*perCl*rounds); got != want {
		t.Fatalf("counter %d, want %d: updates were lost", got, want)
	}
}

// TryDo on a held lock is ErrNotAcquired (not ErrUnavailable), from the same
// client and from another one.
func TestTryDoHeld(t *testing.T) {
	pg := startPG(t)
	c1, c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4)), newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 5 * time.Second}
	lease, err := lockOf(c1, "t", p, "held").Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []*lockkit.Client{c1, c2} {
		ran := false
		err := lockOf(c, "t", p, "held").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { ran = true; return nil })
		if !errors.Is(err, lockkit.ErrNotAcquired) || errors.Is(err, lockkit.ErrUnavailable) || ran {
			t.Fatalf("client %d: TryDo on a held lock = %v (fn ran: %v); want ErrNotAcquired", i+1, err, ran)
		}
	}
	if err := lease.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := lockOf(c2, "t", p, "held").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("TryDo after the release: %v", err)
	}
}

// pg_terminate_backend on the holder's session frees the lock for others at
// once; the holder's fn sees its ctx cancelled with ErrLockLost within a
// renew interval, and Do reports the loss.
func TestTerminatedSession(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	c1, c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4)), newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 3 * time.Second}
	acquired := make(chan string, 1)
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- lockOf(c1, "term", p, "x").Do(ctxT(t, 30*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
			acquired <- lease.Key()
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	key := <-acquired
	pid := holderPID(t, admin, key)
	if pid == 0 {
		t.Fatal("no session holds the lock")
	}
	var ok bool
	if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	terminated := time.Now()
	// Free for others at once: a single attempt succeeds.
	var took time.Duration
	for {
		err := lockOf(c2, "term", p, "x").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil })
		if err == nil {
			took = time.Since(terminated)
			break
		}
		if !errors.Is(err, lockkit.ErrNotAcquired) || time.Since(terminated) > 500*time.Millisecond {
			t.Fatalf("TryDo %v after the holder's session was terminated: %v", time.Since(terminated), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("lock taken by another client %v after pg_terminate_backend", took.Round(time.Microsecond))
	select {
	case c := <-cause:
		if !errors.Is(c, lockkit.ErrLockLost) {
			t.Fatalf("fn's ctx cause %v, want ErrLockLost", c)
		}
		t.Logf("holder told %v after the terminate", time.Since(terminated).Round(time.Millisecond))
	case <-time.After(p.TTL):
		t.Fatal("the holder's fn was not told of the loss within the TTL")
	}
	if err := <-done; !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
}

// A pool whose connections are taken by held locks fails the next acquire
// quickly with a clear error (ErrUnavailable, ErrNoSession), not a hang, and
// that does not open the breaker.
func TestPoolExhausted(t *testing.T) {
	pg := startPG(t)
	// Locks may take 2 of the pool's 4 connections (MaxHeld); the rest stay
	// the application's (and answer the health check's ping).
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4), postgres.WithMaxHeld(2), postgres.WithConnWait(200*time.Millisecond))
	p := lockkit.Policy{TTL: 5 * time.Second}
	for i := range 2 {
		//lockkit-vet:ignore the point: these leases stay held until the client closes, to fill the pool
		if _, err := lockOf(c, "pool", p, strconv.Itoa(i)).Acquire(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 { // more than the breaker's default failure threshold
		start := time.Now()
		_, err := lockOf(c, "pool", p, "third").TryAcquire(ctxT(t, 10*time.Second))
		took := time.Since(start)
		if !errors.Is(err, lockkit.ErrUnavailable) || !errors.Is(err, postgres.ErrNoSession) || errors.Is(err, lockkit.ErrNotAcquired) {
			t.Fatalf("acquire with the pool exhausted = %v; want ErrUnavailable and ErrNoSession", err)
		}
		if !strings.Contains(err.Error(), "no free connection") {
			t.Fatalf("error %q does not say why", err)
		}
		if took > 2*time.Second {
			t.Fatalf("acquire with the pool exhausted took %v", took)
		}
	}
	if h := c.Health(ctxT(t, 5*time.Second)); !h.Healthy || len(h.Breakers) != 1 || h.Breakers[0].State != "closed" {
		t.Fatalf("health with an exhausted pool: %+v; the server is fine, the breaker must stay closed", h)
	}
}

// TestPoolExhaustedConnWait: with the default MaxHeld (half the pool) held,
// more TryAcquires each wait the configured ConnWait, the default (equal to
// the default command timeout) or a longer one, and fail with ErrNoSession;
// none trips the breaker, and Health stays true. Before, the command
// timeout cut the wait short ("waiting for a connection: context deadline
// exceeded"), a longer ConnWait was silently capped, and the breaker opened.
func TestPoolExhaustedConnWait(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprint(wait), func(t *testing.T) {
			var opts []postgres.Option
			if wait > 0 {
				opts = append(opts, postgres.WithConnWait(wait))
			}
			c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4), opts...)
			p := lockkit.Policy{TTL: 5 * time.Second}
			for i := range 2 {
				//lockkit-vet:ignore the point: these leases stay held until the client closes, to fill MaxHeld
				if _, err := lockOf(c, "pool", p, strconv.Itoa(i)).Acquire(ctxT(t, 5*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			want := wait
			if want == 0 {
				want = 500 * time.Millisecond
			}
			for i := range 8 {
				start := time.Now()
				_, err := lockOf(c, "pool", p, "more").TryAcquire(ctxT(t, 20*time.Second))
				took := time.Since(start)
				if !errors.Is(err, postgres.ErrNoSession) || !errors.Is(err, lockkit.ErrUnavailable) {
					t.Fatalf("attempt %d with MaxHeld held = %v after %v; want ErrNoSession", i, err, took)
				}
				if took < want*9/10 || took > want+2*time.Second {
					t.Fatalf("attempt %d failed after %v; want about the ConnWait %v", i, took, want)
				}
			}
			if h := c.Health(ctxT(t, 5*time.Second)); !h.Healthy || h.Breakers[0].State != "closed" {
				t.Fatalf("health after 8 exhausted attempts: %+v; want healthy, breaker closed", h)
			}
		})
	}
}

// Close during Do cancels fn with ErrClosed, waits for it, and only then
// releases the lock (and never before).
func TestCloseDuringDo(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	c1, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 4)), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 5 * time.Second}
	acquired := make(chan string, 1)
	done := make(chan error, 1)
	var heldAtReturn atomic.Bool
	go func() {
		done <- lockOf(c1, "close", p, "x").Do(ctxT(t, 30*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
			acquired <- lease.Key()
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), lockkit.ErrClosed) {
				return fmt.Errorf("cause %v, want ErrClosed", context.Cause(ctx))
			}
			time.Sleep(200 * time.Millisecond) // the lock must stay held meanwhile
			heldAtReturn.Store(holderPID(t, admin, lease.Key()) != 0)
			return nil
		})
	}()
	<-acquired
	if err := c1.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Do: %v", err)
	}
	if !heldAtReturn.Load() {
		t.Fatal("the lock was released while fn was still running")
	}
	if err := lockOf(c2, "close", p, "x").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("TryDo after Close: %v", err)
	}
}

// A restart of the server mid-hold: the holder's fn sees ErrLockLost, new
// holders proceed once the server is back, and fences keep increasing across
// the restart (and a crash).
func TestServerRestart(t *testing.T) {
	pg := startPG(t)
	c1, c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4)), newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 3 * time.Second, Fencing: true, Retry: retry}
	var last int64
	for _, crash := range []bool{false, true} {
		acquired := make(chan int64, 1)
		cause := make(chan error, 1)
		done := make(chan error, 1)
		go func() {
			done <- lockOf(c1, "restart", p, "x").Do(ctxT(t, 30*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
				acquired <- lease.Fence()
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil
			})
		}()
		f1 := <-acquired
		if f1 <= last {
			t.Fatalf("fence %d, not above %d", f1, last)
		}
		if crash {
			pg.Kill(t)
		}
		pg.Restart(t)
		restarted := time.Now()
		select {
		case c := <-cause:
			if !errors.Is(c, lockkit.ErrLockLost) {
				t.Fatalf("fn's cause after a restart (crash %v): %v, want ErrLockLost", crash, c)
			}
		case <-time.After(p.TTL + time.Second):
			t.Fatalf("fn not told of the loss within the TTL after a restart (crash %v)", crash)
		}
		if err := <-done; !errors.Is(err, lockkit.ErrLockLost) {
			t.Fatalf("Do after a restart = %v, want ErrLockLost", err)
		}
		var f2 int64
		if err := lockOf(c2, "restart", p, "x").Do(ctxT(t, 30*time.Second), func(_ context.Context, lease *lockkit.Lease) error {
			f2 = lease.Fence()
			return nil
		}); err != nil {
			t.Fatalf("new holder after the restart: %v", err)
		}
		t.Logf("restart (crash %v): new holder %v after the server was back; fence %d -> %d", crash, time.Since(restarted).Round(time.Millisecond), f1, f2)
		if f2 <= f1 {
			t.Fatalf("fence after the restart %d, not above %d", f2, f1)
		}
		last = f2
	}
}

// The holder process: the test binary re-executed with these variables set.
// It runs Do on a fencing domain, prints "fence N", and inside fn waits for
// "write" on stdin, then tries its fenced write regardless of its ctx (a
// holder that paused after its check), prints "write <outcome>" and, after
// Do returns, "do <error>".
const (
	holderEnv    = "POSTGRES_TEST_HOLDER_DSN"
	holderTTLEnv = "POSTGRES_TEST_HOLDER_TTL"
)

var resource = fence.Table{Table: "resource", KeyColumn: "id"}

func holderMain() int {
	ttl, _ := time.ParseDuration(os.Getenv(holderTTLEnv))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv(holderEnv))
	if err != nil {
		fmt.Printf("error pool: %v\n", err)
		return 1
	}
	defer pool.Close()
	c, err := lockkit.New(postgres.New(pool), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	err = lockOf(c, "paused", lockkit.Policy{TTL: ttl, Fencing: true}, "x").Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Printf("fence %d\n", lease.Fence())
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "write" {
			return fmt.Errorf("stdin: %q %v", line, err)
		}
		// Err checks the clock itself: lost at once on resuming. fn's ctx
		// follows as soon as the deadline timer runs.
		fmt.Printf("err %v\n", errors.Is(lease.Err(), lockkit.ErrLockLost))
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		fmt.Printf("ctx %v\n", errors.Is(context.Cause(ctx), lockkit.ErrLockLost))
		//lockkit-vet:ignore the paused holder's late write must reach the resource, so that its fence is what stops it
		err = resource.Update(context.Background(), db, 1, lease.Fence(), fence.Column{Name: "v", Value: "holder"})
		switch {
		case err == nil:
			fmt.Println("write applied")
		case errors.Is(err, fence.ErrFenced):
			fmt.Println("write fenced")
		default:
			fmt.Printf("write error %v\n", err)
		}
		return nil
	})
	fmt.Printf("do %v\n", errors.Is(err, lockkit.ErrLockLost))
	_ = c.Close(context.Background())
	return 0
}

// A holder process stopped (SIGSTOP) past its TTL keeps its TCP connection,
// but the server's idle limit ends its session: another client gets the lock
// about a TTL later. When the holder resumes, its fn's ctx is cancelled with
// ErrLockLost, its fenced write is turned away, and Do reports the loss.
func TestPausedHolderProcess(t *testing.T) {
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	if _, err := pool.Exec(ctxT(t, 10*time.Second), `CREATE TABLE resource (id int PRIMARY KEY, v text, fence bigint);
		INSERT INTO resource VALUES (1, 'initial', NULL)`); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	child := testserver.StartChild(t, "^$", holderEnv+"="+pg.DSN(), holderTTLEnv+"="+ttl.String())
	f1, err := strconv.ParseInt(strings.TrimPrefix(child.Next(t), "fence "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 10 * time.Second, Fencing: true, Retry: retry}
	// Its renewals keep the lock past the TTL while it runs.
	time.Sleep(2 * ttl)
	if err := lockOf(c, "paused", p, "x").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Fatalf("TryDo while the holder runs: %v, want ErrNotAcquired", err)
	}
	child.Signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	var f2 int64
	var took time.Duration
	if err := lockOf(c, "paused", p, "x").Do(ctxT(t, 20*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
		took = time.Since(stopped)
		f2 = lease.Fence()
		return resource.Update(ctx, db, 1, f2, fence.Column{Name: "v", Value: "new holder"})
	}); err != nil {
		t.Fatalf("new holder: %v", err)
	}
	t.Logf("holder paused; lock granted to another %v later (ttl %v); fences %d -> %d", took.Round(time.Millisecond), ttl, f1, f2)
	if took < ttl/2 || took > ttl+2*time.Second {
		t.Fatalf("lock freed %v after the holder paused; want about the TTL %v", took, ttl)
	}
	if f2 <= f1 {
		t.Fatalf("new holder's fence %d, not above the paused holder's %d", f2, f1)
	}
	child.Signal(t, syscall.SIGCONT)
	child.Send(t, "write")
	if l := child.Next(t); l != "err true" {
		t.Errorf("resumed holder's lease.Err(): %q, want ErrLockLost", l)
	}
	if l := child.Next(t); l != "ctx true" {
		t.Errorf("resumed holder's fn ctx: %q, want cancelled with ErrLockLost", l)
	}
	if l := child.Next(t); l != "write fenced" {
		t.Fatalf("resumed holder's fenced write: %q, want %q", l, "write fenced")
	}
	if l := child.Next(t); l != "do true" {
		t.Fatalf("resumed holder's Do: %q, want ErrLockLost", l)
	}
	var v string
	var stored sql.NullInt64
	if err := db.QueryRowContext(ctxT(t, 5*time.Second), "SELECT v, fence FROM resource WHERE id = 1").Scan(&v, &stored); err != nil {
		t.Fatal(err)
	}
	if v != "new holder" || stored.Int64 != f2 {
		t.Fatalf("resource row: %q fence %v; want the new holder's write with fence %d", v, stored, f2)
	}
}

// DoTx holds the lock for the length of its transaction: others are turned
// away while fn runs, and the lock is free again after a commit and after a
// rollback (fn's error), with the work committed or rolled back with it.
func TestDoTx(t *testing.T) {
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	if _, err := pool.Exec(ctxT(t, 10*time.Second), `CREATE TABLE resource (id int PRIMARY KEY, v text, fence bigint);
		INSERT INTO resource VALUES (1, 'initial', NULL)`); err != nil {
		t.Fatal(err)
	}
	c1, c2 := newClient(t, pool), newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 5 * time.Second, Fencing: true}
	read := func() (string, int64) {
		t.Helper()
		var v string
		var f sql.NullInt64
		if err := pool.QueryRow(ctxT(t, 5*time.Second), "SELECT v, fence FROM resource WHERE id = 1").Scan(&v, &f); err != nil {
			t.Fatal(err)
		}
		return v, f.Int64
	}
	errBoom := errors.New("boom")
	var lastFence int64
	for _, commit := range []bool{true, false} {
		val := fmt.Sprintf("commit=%v", commit)
		err := postgres.DoTx(ctxT(t, 10*time.Second), pool, lockOf(c1, "tx", p, "x"), func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
			if lease.Fence() <= lastFence {
				return fmt.Errorf("fence %d, not above %d", lease.Fence(), lastFence)
			}
			lastFence = lease.Fence()
			// Held: another client's session lock is refused, and so is
			// another transaction's.
			if err := lockOf(c2, "tx", p, "x").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
				return fmt.Errorf("TryDo while DoTx holds the lock: %v, want ErrNotAcquired", err)
			}
			if err := postgres.DoTx(ctx, pool, lockOf(c2, "tx", p, "x"), func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
				return fmt.Errorf("a second DoTx while DoTx holds the lock: %v, want ErrNotAcquired", err)
			}
			// fence.Table's statement, run on the transaction.
			q, args, err := resource.Statement(1, lease.Fence(), fence.Column{Name: "v", Value: val})
			if err != nil {
				return err
			}
			if tag, err := tx.Exec(ctx, q, args...); err != nil || tag.RowsAffected() != 1 {
				return fmt.Errorf("fenced write in the transaction: %v, %d rows", err, tag.RowsAffected())
			}
			if !commit {
				return errBoom
			}
			return nil
		})
		if commit && err != nil || !commit && !errors.Is(err, errBoom) {
			t.Fatalf("DoTx (commit %v) = %v", commit, err)
		}
		v, f := read()
		if commit && (v != val || f != lastFence) || !commit && v == val {
			t.Fatalf("after DoTx (commit %v) the row is %q fence %d", commit, v, f)
		}
		// Released at the transaction's end, either way.
		if err := lockOf(c2, "tx", p, "x").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
			t.Fatalf("TryDo after DoTx (commit %v): %v", commit, err)
		}
	}
}

// A stopped server: acquisitions fail with ErrUnavailable (never
// ErrNotAcquired), the breaker opens after its consecutive failures and then
// refuses at once, health says 503-unhealthy and names the open breaker;
// once the server is back the breaker closes again and locks are granted.
func TestServerDownBreaker(t *testing.T) {
	pg := startPG(t)
	var changes []string
	var mu sync.Mutex
	c, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 4)),
		lockkit.WithLogger(slog.New(slog.DiscardHandler)),
		lockkit.WithBreaker(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: 300 * time.Millisecond,
			OnStateChange: func(_ string, from, to breaker.State) {
				mu.Lock()
				changes = append(changes, from.String()+"->"+to.String())
				mu.Unlock()
			}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctxT(t, 5*time.Second)) })
	l := lockOf(c, "down", lockkit.Policy{TTL: 3 * time.Second}, "x")
	try := func() error {
		lease, err := l.TryAcquire(ctxT(t, 10*time.Second))
		if err == nil {
			if rerr := lease.Release(ctxT(t, 5*time.Second)); rerr != nil {
				t.Log(rerr) // the server may be going down: reported, not fatal
			}
		}
		return err
	}
	if err := try(); err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	for i := range 5 {
		err := try()
		if !errors.Is(err, lockkit.ErrUnavailable) || errors.Is(err, lockkit.ErrNotAcquired) {
			t.Fatalf("attempt %d with the server down: %v, want ErrUnavailable", i, err)
		}
		if i >= 3 && !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("attempt %d after 3 failures: %v, want the open breaker's refusal", i, err)
		}
	}
	h := c.Health(ctxT(t, 5*time.Second))
	if h.Healthy || len(h.Breakers) != 1 || h.Breakers[0].State != "open" {
		t.Fatalf("health with the server down: %+v", h)
	}
	pg.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for try() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no lock 10s after the server came back: %v", try())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h := c.Health(ctxT(t, 5*time.Second)); !h.Healthy {
		t.Fatalf("health after the server came back: %+v", h)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) == 0 || changes[0] != "closed->open" || changes[len(changes)-1] != "half-open->closed" {
		t.Fatalf("breaker changes %v; want closed->open first and half-open->closed last", changes)
	}
}

// Close bounded by a ctx that ends while fn still runs: the lock stays held
// (its session is not closed under fn), Close says a lease was left, and the
// lock is released when fn returns.
func TestCloseTimeoutKeepsLockUnderRunningFn(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	c1, err := lockkit.New(postgres.New(testserver.PgxPool(t, pg.DSN(), 4)), lockkit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	p := lockkit.Policy{TTL: 5 * time.Second}
	acquired := make(chan string, 1)
	finish := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- lockOf(c1, "closeto", p, "x").Do(ctxT(t, 30*time.Second), func(ctx context.Context, lease *lockkit.Lease) error {
			acquired <- lease.Key()
			<-finish // ignores ctx: a slow fn
			return nil
		})
	}()
	key := <-acquired
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = c1.Close(short)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "1 of 1 leases were not released") {
		t.Fatalf("Close with fn still running = %v; want it to say the lease was left", err)
	}
	time.Sleep(100 * time.Millisecond)
	if holderPID(t, admin, key) == 0 {
		t.Fatal("the lock was freed by Close while fn was still running")
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("Do after fn returned: %v", err)
	}
	if pid := holderPID(t, admin, key); pid != 0 {
		t.Fatalf("the lock is still held (pid %d) after Do returned", pid)
	}
}

// TestFIFODomainRefused: a PostgreSQL client refuses a domain with FIFO
// waiting, saying why, rather than polling under a name that promises a
// queue.
func TestFIFODomainRefused(t *testing.T) {
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	d := c.Domain(lockkit.DomainSpec{Name: "fifo", Policy: lockkit.Policy{TTL: time.Second, Wait: lockkit.WaitFIFO,
		Retry: lockkit.Retry{Attempts: 2, MaxWait: time.Second}}})
	err := d.Err()
	if err == nil || !strings.Contains(err.Error(), "wait fifo is not available on the postgres backend") {
		t.Fatalf("FIFO domain on PostgreSQL: %v", err)
	}
}
