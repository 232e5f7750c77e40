package pgbackend_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// The holder process: the test binary re-executed with these variables set.
// It takes the lock with a fence, prints "fence N", extends every ttl/4 (as
// the Client would), and on "write" from stdin reports its Extend and then
// tries its fenced write, printing "write <outcome>".
const (
	holderEnv    = "PGBACKEND_TEST_HOLDER_DSN"
	holderKeyEnv = "PGBACKEND_TEST_HOLDER_KEY"
	holderTTLEnv = "PGBACKEND_TEST_HOLDER_TTL"
)

var resource = fence.Table{Table: "resource", KeyColumn: "id"}

func holderMain() int {
	fail := func(format string, args ...any) int {
		fmt.Printf("error "+format+"\n", args...)
		return 1
	}
	dsn, key := os.Getenv(holderEnv), os.Getenv(holderKeyEnv)
	ttl, err := time.ParseDuration(os.Getenv(holderTTLEnv))
	if err != nil {
		return fail("ttl: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fail("pool: %v", err)
	}
	defer pool.Close()
	b, err := pgbackend.New(pool, pgbackend.Options{})
	if err != nil {
		return fail("%v", err)
	}
	defer b.Close()
	r := &driver.Request{Key: key, Token: "holder", TTL: ttl, Fencing: true}
	fenceNo, err := b.Acquire(ctx, r)
	if err != nil {
		return fail("acquire: %v", err)
	}
	fmt.Printf("fence %d\n", fenceNo)
	go func() {
		for {
			time.Sleep(ttl / 4)
			ectx, ecancel := context.WithTimeout(ctx, ttl/4)
			held, _ := b.Extend(ectx, key, r.Token, ttl)
			ecancel()
			if !held {
				return
			}
		}
	}()
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "write" {
		return fail("stdin: %q %v", line, err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
	held, err := b.Extend(ectx, key, r.Token, ttl)
	ecancel()
	fmt.Printf("extend %v %v\n", held, err)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	err = resource.Update(ctx, db, 1, fenceNo, fence.Column{Name: "v", Value: "holder"})
	switch {
	case err == nil:
		fmt.Println("write applied")
	case errors.Is(err, fence.ErrFenced):
		fmt.Println("write fenced")
	default:
		fmt.Printf("write error %v\n", err)
	}
	return 0
}

// TestPausedHolderProcess: a holder process stopped with SIGSTOP past its ttl
// keeps its TCP connection, but the server's idle limit ends its session:
// another holder gets the lock about ttl after the pause, and the paused
// holder's fenced write, once it resumes, is turned away.
func TestPausedHolderProcess(t *testing.T) {
	pg := startPG(t)
	ctx := ctxT(t, 60*time.Second)
	pool := testserver.PgxPool(t, pg.DSN(), 4)
	if _, err := pool.Exec(ctx, `CREATE TABLE resource (id int PRIMARY KEY, v text, fence bigint);
		INSERT INTO resource VALUES (1, 'initial', NULL)`); err != nil {
		t.Fatal(err)
	}
	const (
		key = "lock:paused"
		ttl = time.Second
	)
	child := testserver.StartChild(t, "^$", holderEnv+"="+pg.DSN(), holderKeyEnv+"="+key, holderTTLEnv+"="+ttl.String())
	f1, err := strconv.ParseInt(strings.TrimPrefix(child.Next(t), "fence "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	b := newBackend(t, pool, pgbackend.Options{})
	// Its renewals keep the lock past the ttl while it runs.
	time.Sleep(2 * ttl)
	mustContend(t, b, req(key, ttl, true))

	child.Signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	r := req(key, 10*time.Second, true)
	f2, took := acquireWithin(t, b, r, 10*time.Second)
	t.Logf("holder paused; lock granted to another %v later (ttl %v)", took.Round(time.Millisecond), ttl)
	if took > ttl+time.Second {
		t.Fatalf("lock freed %v after the holder paused; want about the ttl %v", took, ttl)
	}
	if took < ttl/2 {
		t.Fatalf("lock freed %v after the holder paused, long before the ttl %v: renewals did not hold it", took, ttl)
	}
	if f2 <= f1 {
		t.Fatalf("new holder's fence %d, not above the paused holder's %d", f2, f1)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := resource.Update(ctx, db, 1, f2, fence.Column{Name: "v", Value: "new holder"}); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if time.Since(stopped) < 2*ttl {
		time.Sleep(2*ttl - time.Since(stopped))
	}

	child.Signal(t, syscall.SIGCONT)
	child.Send(t, "write")
	if l := child.Next(t); l != "extend false <nil>" {
		t.Errorf("resumed holder's Extend: %q, want %q", l, "extend false <nil>")
	}
	if l := child.Next(t); l != "write fenced" {
		t.Fatalf("resumed holder's fenced write: %q, want %q", l, "write fenced")
	}
	var v string
	var stored sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT v, fence FROM resource WHERE id = 1").Scan(&v, &stored); err != nil {
		t.Fatal(err)
	}
	if v != "new holder" || stored.Int64 != f2 {
		t.Fatalf("resource row: %q fence %v; want the new holder's write with fence %d", v, stored, f2)
	}
	if err := child.Wait(t, 10*time.Second); err != nil {
		t.Fatalf("holder process: %v", err)
	}
}

// TestServerRestart: a restart mid-hold ends the holding session; Extend
// says so (false, no error), and new holders proceed once the server is back,
// with fences above every earlier one, also after a crash (SIGKILL).
func TestServerRestart(t *testing.T) {
	pg := startPG(t)
	pool1, pool2 := testserver.PgxPool(t, pg.DSN(), 4), testserver.PgxPool(t, pg.DSN(), 4)
	b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
	ctx := ctxT(t, 60*time.Second)

	// First, a server process that does not answer: Extend cannot tell,
	// and says so with an error, not a loss. The lease is still valid on the
	// Client's clock, so the connection is kept (closing it would free the
	// lock): once the server answers again the lock is still held, and the
	// next Extend says so. (The holding backend is stopped by its pid here.)
	rp := req("lock:paused-server", 30*time.Second, false)
	mustAcquire(t, b1, rp)
	bpid := holderPID(t, pool2, rp.Key)
	if err := syscall.Kill(bpid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the holding backend (pid %d): %v", bpid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(bpid, syscall.SIGCONT) })
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	held, err := b1.Extend(short, rp.Key, rp.Token, rp.TTL)
	cancel()
	if err := syscall.Kill(bpid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if held || err == nil || errors.Is(err, driver.ErrContended) {
		t.Fatalf("Extend against a paused server = %v, %v; want an error", held, err)
	}
	mustContend(t, b2, req(rp.Key, time.Second, false))
	if held, err := b1.Extend(ctx, rp.Key, rp.Token, rp.TTL); !held || err != nil {
		t.Fatalf("Extend after the timed-out one = %v, %v; want true, nil", held, err)
	}
	if held, err := b1.Release(ctx, rp.Key, rp.Token); !held || err != nil {
		t.Fatalf("Release after the stall = %v, %v; want true, nil", held, err)
	}

	const key = "lock:restart"
	var last int64
	for i, crash := range []bool{false, true} {
		// A short ttl: the lease's record outlives the restart and keeps
		// the next holder out until it expires (lock-delay).
		r := req(key, 2*time.Second, true)
		var f int64
		if i == 0 {
			f = mustAcquire(t, b1, r)
		} else {
			f, _ = acquireWithin(t, b1, r, 10*time.Second)
		}
		if f <= last {
			t.Fatalf("fence %d, not above %d", f, last)
		}
		last = f
		if crash {
			pg.Kill(t)
			pg.Restart(t)
		} else {
			pg.Restart(t)
		}
		if s := storedFence(t, pool2, key); s != f { // pool2 reconnects: its idle connections died with the server
			t.Fatalf("after the restart (crash %v) the stored fence is %d, want %d: the table lost the grant", crash, s, f)
		}
		held, err := b1.Extend(ctx, r.Key, r.Token, r.TTL)
		if held || err != nil {
			t.Fatalf("Extend after a restart (crash %v) = %v, %v; want false, nil", crash, held, err)
		}
		r2 := req(key, 30*time.Second, true)
		f2, took := acquireWithin(t, b2, r2, 10*time.Second)
		t.Logf("restart (crash %v): new holder in %v, fence %d -> %d", crash, took.Round(time.Millisecond), f, f2)
		if f2 <= last {
			t.Fatalf("fence after the restart %d, not above %d", f2, last)
		}
		last = f2
		if held, err := b1.Release(ctx, r.Key, r.Token); held || err != nil {
			t.Fatalf("old holder's Release = %v, %v; want false, nil", held, err)
		}
		if held, err := b2.Release(ctx, r2.Key, r2.Token); !held || err != nil {
			t.Fatalf("new holder's Release = %v, %v", held, err)
		}
	}
	if s := storedFence(t, pool2, key); s != last {
		t.Fatalf("stored fence %d, last issued %d", s, last)
	}
}
