package testserver

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("server", func(t *testing.T) {
		pg := StartPostgres(t)
		pid = pg.PID()
		ctx := ctxT(t, 30*time.Second)
		want := "postgres://postgres@127.0.0.1:" + strconv.Itoa(pg.Port()) + "/postgres?sslmode=disable"
		if pg.DSN() != want {
			t.Fatalf("DSN() = %q, want %q", pg.DSN(), want)
		}
		conn, err := pgx.Connect(ctx, pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 = %d, %v", one, err)
		}
		for setting, want := range map[string]string{"listen_addresses": "127.0.0.1", "fsync": "off", "unix_socket_directories": pg.Dir()} {
			var got string
			if err := conn.QueryRow(ctx, "SHOW "+setting).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if setting == "unix_socket_directories" && got == "" {
				continue // temp dir path too long for a socket: TCP only
			}
			if got != want {
				t.Errorf("SHOW %s = %q, want %q", setting, got, want)
			}
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		if os.Geteuid() == 0 {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.SplitSeq(string(st), "\n") {
				if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == "0" {
					t.Errorf("postgres runs as root: %s", line)
				}
			}
		}

		// Kill and restart: same port, new pid, committed data still there.
		port := pg.Port()
		pg.Kill(t)
		assertGone(t, "killed postmaster", pid)
		pg.Restart(t)
		if pg.Port() != port || pg.PID() == pid {
			t.Fatalf("after Restart: port %d pid %d; before: port %d pid %d", pg.Port(), pg.PID(), port, pid)
		}
		pid = pg.PID()
		conn, err = pgx.Connect(ctx, pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var v string
		if err := conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil || v != "kept" {
			t.Fatalf("after Kill+Restart: SELECT v = %q, %v", v, err)
		}
	})
	assertGone(t, "postmaster", pid)
}

// TestPostgresPauseStopsSessions: a paused server answers nothing, on an
// existing session either (its backend left the postmaster's process group
// with setsid), and answers again after Resume.
func TestPostgresPauseStopsSessions(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	ctx := ctxT(t, 60*time.Second)
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	pg.Pause(t)
	if st := pg.stoppedPIDs(); !slices.Contains(st, pg.PID()) {
		pg.Resume(t)
		t.Fatalf("after Pause, the stopped processes %v do not include the postmaster %d", st, pg.PID())
	}
	qctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	err = conn.QueryRow(qctx, "SELECT 1").Scan(&one)
	cancel()
	if err == nil {
		pg.Resume(t)
		t.Fatal("a paused server answered SELECT 1 on an existing session")
	}
	pg.Resume(t)
	if st := pg.stoppedPIDs(); len(st) > 0 {
		t.Fatalf("after Resume, processes %v of the server are still stopped", st)
	}
	conn2, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	defer conn2.Close(ctx)
	if err := conn2.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}
