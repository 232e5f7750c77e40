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
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lockkit/lockkit/internal/testlog"
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

// testOptions are the options of every test client: its log lines go to the
// test log, under the run's key mode and scanned for a raw key in a hashed
// run (internal/testlog).
func testOptions(t testing.TB) []lockkit.Option {
	return []lockkit.Option{lockkit.WithLogger(testlog.Logger(t)), lockkit.WithKeyMode(testlog.KeyMode())}
}

// newClient is a lockkit client over pool, closed with the test.
func newClient(t testing.TB, pool *pgxpool.Pool, opts ...postgres.Option) *lockkit.Client {
	t.Helper()
	c, err := lockkit.New(postgres.New(pool, opts...), testOptions(t)...)
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
	return lockPID(t, pool, key, true)
}

// lockPID is the pid of a PostgreSQL backend that holds (granted) or waits
// for (not granted) key's advisory lock, or 0.
func lockPID(t testing.TB, pool *pgxpool.Pool, key string, granted bool) int {
	t.Helper()
	id := postgres.KeyID(key)
	var pid int
	err := pool.QueryRow(ctxT(t, 5*time.Second), `SELECT coalesce((SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted = $3 AND objsubid = 1
		AND classid = $1::oid AND objid = $2::oid LIMIT 1), 0)`,
		uint32(uint64(id)>>32), uint32(uint64(id)), granted).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// exhaust checks out every connection of pool for the application until
// the test ends.
func exhaust(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for range pool.Config().MaxConns {
		conn, err := pool.Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Release)
	}
}

// A pool whose connections the application has all taken fails an acquire
// (of a client with no session yet) quickly with a clear error
// (ErrUnavailable, ErrNoSession), not a hang, and that does not open the
// breaker; Health pings over a connection of its own.
func TestPoolExhausted(t *testing.T) {
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	c := newClient(t, pool, postgres.WithMaxHeld(2), postgres.WithConnWait(200*time.Millisecond))
	exhaust(t, pool)
	p := lockkit.Policy{TTL: 5 * time.Second}
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

// TestPoolExhaustedConnWait: with the pool taken by the application, more
// TryAcquires each wait the configured ConnWait, the default (equal to the
// default command timeout) or a longer one, and fail with ErrNoSession;
// none trips the breaker, and Health stays true. Before, the command
// timeout cut the wait short ("waiting for a connection: context deadline
// exceeded"), a longer ConnWait was silently capped, and the breaker opened.
// Held locks never exhaust it any more: they share MaxHeld sessions
// (TestManyLocksPerSession).
func TestPoolExhaustedConnWait(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprint(wait), func(t *testing.T) {
			var opts []postgres.Option
			if wait > 0 {
				opts = append(opts, postgres.WithConnWait(wait))
			}
			pool := testserver.PgxPool(t, pg.DSN(), 4)
			c := newClient(t, pool, opts...)
			exhaust(t, pool)
			p := lockkit.Policy{TTL: 5 * time.Second}
			want := wait
			if want == 0 {
				want = 500 * time.Millisecond
			}
			for i := range 8 {
				start := time.Now()
				_, err := lockOf(c, "pool", p, "more").TryAcquire(ctxT(t, 20*time.Second))
				took := time.Since(start)
				if !errors.Is(err, postgres.ErrNoSession) || !errors.Is(err, lockkit.ErrUnavailable) {
					t.Fatalf("attempt %d with the pool exhausted = %v after %v; want ErrNoSession", i, err, took)
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

// A crash of the server mid-hold (SIGKILL of every process, then crash
// recovery): the holder's fn sees ErrLockLost, a new holder proceeds once
// the server is back, and its fence is above the one before the crash. A
// graceful restart is drivertest's Restart (TestConformance).
func TestServerCrash(t *testing.T) {
	pg := startPG(t)
	c1, c2 := newClient(t, testserver.PgxPool(t, pg.DSN(), 4)), newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
	p := lockkit.Policy{TTL: 3 * time.Second, Fencing: true, Retry: retry}
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
	pg.Kill(t)
	pg.Restart(t)
	restarted := time.Now()
	select {
	case c := <-cause:
		if !errors.Is(c, lockkit.ErrLockLost) {
			t.Fatalf("fn's cause after a crash: %v, want ErrLockLost", c)
		}
	case <-time.After(p.TTL + time.Second):
		t.Fatal("fn not told of the loss within the TTL after a crash")
	}
	if err := <-done; !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("Do after a crash = %v, want ErrLockLost", err)
	}
	var f2 int64
	if err := lockOf(c2, "restart", p, "x").Do(ctxT(t, 30*time.Second), func(_ context.Context, lease *lockkit.Lease) error {
		f2 = lease.Fence()
		return nil
	}); err != nil {
		t.Fatalf("new holder after the crash: %v", err)
	}
	t.Logf("crash: new holder %v after the server was back; fence %d -> %d", time.Since(restarted).Round(time.Millisecond), f1, f2)
	if f2 <= f1 {
		t.Fatalf("fence after the crash %d, not above %d", f2, f1)
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

// TestFIFODomainWithoutMaxWaitRefused: a FIFO domain is accepted on
// PostgreSQL (TestFIFOOnPostgres; before, every FIFO domain was refused
// with "wait fifo is not available on the postgres backend"), but not one
// without a max_wait, saying why.
func TestFIFODomainWithoutMaxWaitRefused(t *testing.T) {
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	d := c.Domain(lockkit.DomainSpec{Name: "fifo", Policy: lockkit.Policy{TTL: time.Second, Wait: "fifo",
		Retry: lockkit.Retry{Attempts: 2, MaxWait: time.Second}}})
	if err := d.Err(); err != nil {
		t.Fatalf("FIFO domain on PostgreSQL: %v", err)
	}
	d = c.Domain(lockkit.DomainSpec{Name: "fifo-unbounded", Policy: lockkit.Policy{TTL: time.Second, Wait: "fifo",
		Retry: lockkit.Retry{Attempts: 2}}})
	if err := d.Err(); err == nil || !strings.Contains(err.Error(), "max_wait") {
		t.Fatalf("FIFO domain on PostgreSQL without max_wait: %v", err)
	}
}

// TestHealthFullyHeldPool: Client.Health stays true while every connection
// of a dedicated pool (MaxHeld = MaxConns) holds a lock: the server is fine.
// Before, the health check's ping waited behind the held connections until
// its ctx ended, and Health read unhealthy exactly when the locks were busiest.
func TestHealthFullyHeldPool(t *testing.T) {
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2), postgres.WithMaxHeld(2))
	p := lockkit.Policy{TTL: 30 * time.Second}
	for i := range 2 {
		//lockkit-vet:ignore the point: these leases stay held until the client closes, to fill the pool
		if _, err := lockOf(c, "health", p, strconv.Itoa(i)).Acquire(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	h := c.Health(ctxT(t, 5*time.Second))
	if !h.Healthy {
		t.Fatalf("Health with every pool connection holding a lock: %+v after %v", h, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("Health answered healthy in %v", time.Since(start).Round(time.Millisecond))
}
