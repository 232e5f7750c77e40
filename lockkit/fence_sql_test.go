package lockkit

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/lockkit/lockkit/internal/testserver"
)

// startBookings starts PostgreSQL 15 with a bookings table made the way an
// existing application's would be, then applies the documented migration.
func startBookings(t *testing.T, table string) (db *sql.DB, dsn string) {
	t.Helper()
	pg := testserver.StartPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(16)
	q := pgx.Identifier{table}.Sanitize()
	for _, stmt := range []string{
		`CREATE TABLE ` + q + ` (id text PRIMARY KEY, guest text)`,
		`INSERT INTO ` + q + ` (id, guest) VALUES ('12', NULL), ('stress', NULL)`,
		// The migration, as documented:
		`ALTER TABLE ` + q + ` ADD COLUMN fence bigint`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return db, pg.DSN()
}

func guestAndFence(t *testing.T, db *sql.DB, table, id string) (string, sql.NullInt64) {
	t.Helper()
	var guest sql.NullString
	var fence sql.NullInt64
	err := db.QueryRowContext(t.Context(), `SELECT guest, fence FROM `+pgx.Identifier{table}.Sanitize()+` WHERE id = $1`, id).Scan(&guest, &fence)
	if err != nil {
		t.Fatal(err)
	}
	return guest.String, fence
}

// Update's rules on real PostgreSQL: a never-fenced row (NULL) takes the
// first fence; equal and higher fences apply; a lower one is fence.ErrFenced with
// the stored fence; a missing row is sql.ErrNoRows, not fence.ErrFenced. The same
// through *sql.Tx (rolled back with it), *sql.Conn, and pgx without
// database/sql via Statement. The table's name needs quoting.
func TestFencedTableUpdatePostgres(t *testing.T) {
	const name = `Book"ings`
	db, dsn := startBookings(t, name)
	ctx := t.Context()
	tbl := fence.Table{Table: name, KeyColumn: "id"}
	guest := func(g string) fence.Column { return fence.Column{Name: "guest", Value: g} }

	if _, f := guestAndFence(t, db, name, "12"); f.Valid {
		t.Fatalf("fence after the migration = %v, want NULL", f)
	}
	steps := []struct {
		fence  int64
		accept bool
	}{{50, true}, {50, true}, {51, true}, {49, false}, {1<<53 + 1, true}, {1 << 53, false}, {1<<63 - 1, true}, {1<<63 - 2, false}}
	var wantGuest string
	var wantFence int64
	for i, s := range steps {
		g := "guest " + string(rune('A'+i))
		err := tbl.Update(ctx, db, "12", s.fence, guest(g))
		if s.accept {
			if err != nil {
				t.Fatalf("step %d: Update(fence %d) = %v", i, s.fence, err)
			}
			wantGuest, wantFence = g, s.fence
		} else {
			var fe *fence.Error
			if !errors.Is(err, fence.ErrFenced) || !errors.As(err, &fe) || fe.Fence != s.fence || fe.Current != wantFence {
				t.Fatalf("step %d: Update(fence %d) = %v, want fence.ErrFenced with current fence %d", i, s.fence, err, wantFence)
			}
			if !strings.Contains(err.Error(), `"id" = 12`) {
				t.Fatalf("step %d: error %q does not name the row", i, err)
			}
		}
		if g, f := guestAndFence(t, db, name, "12"); g != wantGuest || f.Int64 != wantFence {
			t.Fatalf("step %d: row = %q, fence %v; want %q, %d", i, g, f, wantGuest, wantFence)
		}
	}

	err := tbl.Update(ctx, db, "no-such-id", 10, guest("x"))
	if !errors.Is(err, sql.ErrNoRows) || errors.Is(err, fence.ErrFenced) {
		t.Fatalf("Update of a missing row = %v, want sql.ErrNoRows and not fence.ErrFenced", err)
	}

	// In a transaction: the update and the follow-up read see the tx, and a
	// rollback undoes the fence with the rest.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, tx, "stress", 7, guest("in tx")); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, tx, "stress", 6, guest("stale in tx")); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale update in the tx = %v, want fence.ErrFenced", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if g, f := guestAndFence(t, db, name, "stress"); g != "" || f.Valid {
		t.Fatalf("after rollback the row is %q, fence %v", g, f)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := tbl.Update(ctx, conn, "stress", 3, guest("via conn")); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, conn, "stress", 2, guest("stale via conn")); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale update via *sql.Conn = %v, want fence.ErrFenced", err)
	}

	// pgx without database/sql: run Statement yourself.
	pc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	for _, s := range []struct {
		fence int64
		rows  int64
	}{{4, 1}, {3, 0}} {
		q, args, err := tbl.Statement("stress", s.fence, guest("via pgx"))
		if err != nil {
			t.Fatal(err)
		}
		tag, err := pc.Exec(ctx, q, args...)
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() != s.rows {
			t.Fatalf("pgx Exec with fence %d: %d rows, want %d", s.fence, tag.RowsAffected(), s.rows)
		}
	}
	if g, f := guestAndFence(t, db, name, "stress"); g != "via pgx" || f.Int64 != 4 {
		t.Fatalf("row = %q, fence %v; want pgx's write with fence 4", g, f)
	}
}

// The seeds' scenario, with PostgreSQL as the resource: A's stale update is
// turned away with fence.ErrFenced and B's booking stands.
func TestFenceScenarioPostgres(t *testing.T) {
	r := testserver.StartRedis(t)
	db, _ := startBookings(t, "bookings")
	ctx := t.Context()
	tbl := fence.Table{Table: "bookings", KeyColumn: "id"}
	const ttl = 500 * time.Millisecond // well above a slow reply on a loaded machine
	pa := fencing(ttl)
	pa.Renew = -1 // a paused process renews nothing
	// A short TTL needs a command timeout that leaves renewals room.
	a := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), pa), "12")
	b := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), fencing(ttl)), "12")

	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := la.Fence()
	<-la.Done() // A is paused past its TTL
	waitGone(t, r, a.Key())
	var nb int64
	err = b.Do(ctx, func(ctx context.Context, lb *Lease) error {
		if nb = lb.Fence(); nb <= n {
			t.Errorf("B's fence %d, want above A's %d", nb, n)
		}
		return tbl.Update(ctx, db, "12", lb.Fence(), fence.Column{Name: "guest", Value: "B"})
	})
	if err != nil {
		t.Fatalf("B's booking: %v", err)
	}
	err = tbl.Update(ctx, db, "12", n, fence.Column{Name: "guest", Value: "A"}) // A wakes up
	var fe *fence.Error
	if !errors.Is(err, fence.ErrFenced) || !errors.As(err, &fe) || fe.Current != nb {
		t.Fatalf("A's stale update = %v, want fence.ErrFenced with the row's fence %d", err, nb)
	}
	t.Logf("A's update: %v", err)
	if g, f := guestAndFence(t, db, "bookings", "12"); g != "B" || f.Int64 != nb {
		t.Fatalf("row = %q, fence %v; want B's booking", g, f)
	}
}

// The stress test with PostgreSQL as the resource. The history is the
// database's own: an AFTER UPDATE trigger appends every applied update to a
// log numbered by a sequence. The trigger runs while the update holds the
// row lock, which the next update of the row waits for until commit, so the
// log's order is the order the row's updates committed in.
func TestFencedStressPostgres(t *testing.T) {
	r := testserver.StartRedis(t)
	db, _ := startBookings(t, "bookings")
	for _, stmt := range []string{
		`CREATE TABLE booking_log (seq bigserial PRIMARY KEY, id text, guest text, fence bigint, txid bigint, at timestamptz)`,
		`CREATE FUNCTION log_booking() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO booking_log (id, guest, fence, txid, at) VALUES (NEW.id, NEW.guest, NEW.fence, txid_current(), clock_timestamp());
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER bookings_log AFTER UPDATE ON bookings FOR EACH ROW EXECUTE FUNCTION log_booking()`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	tbl := fence.Table{Table: "bookings", KeyColumn: "id"}
	res := runFencingStress(t, r, func(ctx context.Context, value string, fenceNo int64) error {
		return tbl.Update(ctx, db, "stress", fenceNo, fence.Column{Name: "guest", Value: value})
	})
	rows, err := db.QueryContext(t.Context(), `SELECT guest, fence FROM booking_log WHERE id = 'stress' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var history []historyEntry
	for rows.Next() {
		var h historyEntry
		if err := rows.Scan(&h.value, &h.fence); err != nil {
			t.Fatal(err)
		}
		history = append(history, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, res, history)
}
