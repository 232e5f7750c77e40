package pgbackend_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestStalledRenewalKeepsLock: a holder's renewal that gets no answer within
// its command timeout (its backend paused, the whole server paused, or its
// TCP path stalled, each for 1.2s) reports an error, not a loss, so the
// lease stays valid on the Client's clock (TTL 30s): the server must then
// keep the lock. Before, pgx closed the timed-out connection, the server
// freed the lock, and another backend was granted it while the lease was
// valid. The next renewal succeeds once the stall ends.
func TestStalledRenewalKeepsLock(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	const stall = 1200 * time.Millisecond
	for _, form := range []string{"backend paused", "server paused", "tcp stalled"} {
		t.Run(form, func(t *testing.T) {
			dsnA := pg.DSN()
			var proxy *toxiproxy.Proxy
			if form == "tcp stalled" {
				srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
				proxy = toxiproxy.NewProxy(srv, "pg", "127.0.0.1:0", pg.Addr())
				if err := proxy.Start(); err != nil {
					t.Fatalf("toxiproxy: %v", err)
				}
				t.Cleanup(proxy.Stop)
				dsnA = strings.Replace(dsnA, pg.Addr(), proxy.Listen, 1)
			}
			poolA := testserver.PgxPool(t, dsnA, 4)
			poolB := testserver.PgxPool(t, pg.DSN(), 4)
			a, b := newBackend(t, poolA, pgbackend.Options{}), newBackend(t, poolB, pgbackend.Options{})
			key := "stall:" + form
			ra := req(key, 30*time.Second, false)
			mustAcquire(t, a, ra)
			pid := holderPID(t, poolB, key)
			if pid == 0 {
				t.Fatal("no holder pid")
			}
			var unstall func()
			switch form {
			case "backend paused":
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				unstall = func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
			case "server paused":
				pg.Pause(t)
				unstall = func() { pg.Resume(t) }
			default:
				js := fmt.Sprintf(`{"name":"stall","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d}}`, stall.Milliseconds())
				if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
					t.Fatal(err)
				}
				unstall = func() { _ = proxy.Toxics.RemoveToxic(context.Background(), "stall") }
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			held, err := a.Extend(ctx, key, ra.Token, ra.TTL)
			cancel()
			time.Sleep(stall - time.Since(start))
			unstall()
			if err == nil {
				t.Fatalf("Extend during a %v stall = %v, nil; want an error (no answer)", stall, held)
			}
			t.Logf("stalled Extend: %v", err)
			// The lease is valid on the Client's clock for 30s more: no one
			// else may be granted the key. Give the server time to act on a
			// closed connection, as it did before.
			time.Sleep(300 * time.Millisecond)
			mustContend(t, b, req(key, 30*time.Second, false))
			held, err = a.Extend(ctxT(t, 5*time.Second), key, ra.Token, ra.TTL)
			if err != nil || !held {
				t.Fatalf("Extend after the stall = %v, %v; want true, nil", held, err)
			}
		})
	}
}

// TestLostLeaseFreesAtOnce: a lease found lost by Extend (its session ended
// with pg_terminate_backend) and never released leaves nothing in the
// backend: its key can be taken again by the same backend, its MaxHeld slot
// is free (MaxHeld 1 here), and Held counts nothing. Before, the key answered
// "held" without asking the server and the slot stayed taken until Close.
func TestLostLeaseFreesAtOnce(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 2)
	b := newBackend(t, pool, pgbackend.Options{MaxHeld: 1})
	r := req("lost:unreleased", 30*time.Second, false)
	mustAcquire(t, b, r)
	admin := testserver.PgxPool(t, pg.DSN(), 1)
	pid := holderPID(t, admin, r.Key)
	if _, err := admin.Exec(ctxT(t, 5*time.Second), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		held, err := b.Extend(ctxT(t, 5*time.Second), r.Key, r.Token, r.TTL)
		if err == nil && !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Extend after terminate = %v, %v; want false, nil", held, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := b.Held(); n != 0 {
		t.Fatalf("Held() after the loss = %d, want 0", n)
	}
	// pg_terminate_backend only signals: the backend drops its locks as it
	// exits, which a loaded machine can delay past the client's loss (a CPU
	// hog rehearsal's acquire below was refused as held). Wait until the
	// server lists none of its locks, so the acquire checks the client.
	gone := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT count(*) FROM pg_locks WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(gone) {
			t.Fatalf("the terminated backend %d still holds %d locks after 10s", pid, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The server keeps others out until the lease's record expires
	// (lock-delay); with it deleted, this checks the client alone.
	if _, err := admin.Exec(ctxT(t, 5*time.Second), "DELETE FROM lockkit_leases WHERE id = $1", pgbackend.KeyID(r.Key)); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b, req(r.Key, 30*time.Second, false)) // same key, the one slot
}

// TestPingFullyHeldPool: Ping answers while every connection of a dedicated
// pool (MaxHeld = MaxConns) holds a lock. Before, it waited for a pool
// connection until its ctx ended ("ping: context deadline exceeded").
func TestPingFullyHeldPool(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	pool := testserver.PgxPool(t, pg.DSN(), 2)
	b := newBackend(t, pool, pgbackend.Options{MaxHeld: 2})
	mustAcquire(t, b, req("ping:a", 30*time.Second, false))
	mustAcquire(t, b, req("ping:b", 30*time.Second, false))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Ping(ctx); err != nil {
		t.Fatalf("Ping with every pool connection holding a lock: %v after %v", err, time.Since(start))
	}
	t.Logf("Ping answered in %v", time.Since(start))
}
