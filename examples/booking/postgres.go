package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// runPostgres tells the stories on PostgreSQL (DATABASE_URL): the same race,
// with the locks held as session advisory locks and the bookings in a table;
// a crashed holder, whose lock nobody gets before its lease has run out; and
// a booking whose lock and row commit (or roll back) together.
func runPostgres(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	pool, err := env.NewPool(ctx, 4)
	if err != nil {
		return err
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	db := &pgDatabase{pool: pool}
	if err := db.reset(ctx); err != nil {
		return err
	}
	tr := env.Tracer("github.com/lockkit/lockkit/examples/booking")
	if err := race(ctx, w, env, db, tr); err != nil {
		return err
	}
	if err := crashPostgres(ctx, w, env, db); err != nil {
		return err
	}
	return transactional(ctx, w, env, db)
}

// crashPostgres: a holder dies without releasing. On PostgreSQL its lock is
// its session's, and the server frees it as soon as the connection drops;
// but the server cannot tell a dead holder from a live one whose session was
// ended under it, so lockkit's lease record (a lock-delay) keeps the key from
// anyone else until the dead holder's lease has run out.
func crashPostgres(ctx context.Context, w io.Writer, env *exampleenv.Env, db *pgDatabase) error {
	const crashTTL = time.Second
	fmt.Fprintln(w, "\n2. Crash: a holder that never releases")
	fmt.Fprintf(w, "   (replica-D runs with LOCKKIT_TTL_TABLE=%v)\n", crashTTL)
	d, err := withTableTTL(crashTTL, func() (*lockkit.Client, error) {
		c, _, err := env.NewPostgresClient(ctx, lockkit.WithLogger(discardLogger))
		return c, err
	})
	if err != nil {
		return err
	}
	e, _, err := env.NewPostgresClient(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	//lockkit-vet:ignore the crash demo: replica-D dies holding the lease
	leaseD, err := locks.New(d).Table("3").Acquire(ctx)
	if err != nil {
		return fmt.Errorf("replica-D: %w", err)
	}
	if err := locks.New(e).Table("3").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
		return fmt.Errorf("replica-E's try on table 3 while replica-D holds it: %v, want ErrNotAcquired", err)
	}
	if err := env.Crash(d); err != nil {
		return err
	}
	fmt.Fprintf(w, "   %s replica-D  acquired %s (fence %d) for Frank, then crashed: its connections dropped, no release\n",
		exampleenv.Stamp(time.Since(start)), leaseD.Key(), leaseD.Fence())
	if err := locks.New(e).Table("3").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
		return fmt.Errorf("replica-E's try on table 3 right after replica-D crashed: %v, want ErrNotAcquired (the dead holder's lease has not run out)", err)
	}
	fmt.Fprintf(w, "   %s replica-E  tries table 3 at once: not acquired; replica-D's lease runs until %v\n",
		exampleenv.Stamp(time.Since(start)), exampleenv.Stamp(leaseD.Deadline().Sub(start)))
	time.Sleep(time.Until(leaseD.Deadline()))
	eve := &replicaSvc{name: "replica-E", table: locks.New(e).Table, db: db}
	waitFrom := time.Now()
	var log exampleenv.Timeline
	res := eve.reserve(ctx, env.Tracer("booking"), "3", "Eve", start, &log)
	waited := time.Since(waitFrom)
	log.Print(w)
	switch {
	case res.err != nil:
		return fmt.Errorf("replica-E reserving table 3: %w", res.err)
	case !res.booked:
		return errors.New("replica-E could not book table 3 after the holder crashed")
	}
	fmt.Fprintf(w, "   result: Eve got table 3 %v after replica-D's lease ran out. PostgreSQL ended the dead holder's session when its\n", waited.Round(time.Millisecond))
	fmt.Fprintln(w, "   connection dropped, and the lock with it; lockkit's lease record (docs/semantics.md, guarantee 1) kept the key")
	fmt.Fprintln(w, "   from Eve until the lease's deadline, since the server cannot tell a dead holder from a live one whose session")
	fmt.Fprintln(w, "   was ended under it (a live one is told ErrLockLost by then).")
	return nil
}

// transactional: postgres.DoTx books table 5 in one transaction with its
// lock; a booking whose work fails rolls back, lock and row together.
func transactional(ctx context.Context, w io.Writer, env *exampleenv.Env, db *pgDatabase) error {
	fmt.Fprintln(w, "\n3. A transaction-scoped lock: the lock and the booking commit or roll back together")
	c, pool, err := env.NewPostgresClient(ctx)
	if err != nil {
		return err
	}
	other, _, err := env.NewPostgresClient(ctx)
	if err != nil {
		return err
	}
	book := func(guest string, fail bool) error {
		return postgres.DoTx(ctx, pool, locks.New(c).Table("5").Lock, func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
			if err := locks.New(other).Table("5").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil }); !errors.Is(err, lockkit.ErrNotAcquired) {
				return fmt.Errorf("another replica's try on table 5 inside the transaction: %v, want ErrNotAcquired", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO lockkit_example_bookings (table_id, guest) VALUES ('5', $1)`, guest); err != nil {
				return err
			}
			fmt.Fprintf(w, "   %s: lock %s taken in the transaction (fence %d), booking written\n", guest, lease.Key(), lease.Fence())
			if fail {
				return errors.New("the payment provider declined")
			}
			return nil
		})
	}
	if err := book("Grace", true); err == nil {
		return errors.New("Grace's failed booking returned no error")
	} else {
		fmt.Fprintf(w, "   Grace: %v: rolled back\n", err)
	}
	if n, err := db.count(ctx, "5"); err != nil || n != 0 {
		return fmt.Errorf("table 5 after the rollback: %d bookings (%v), want none", n, err)
	}
	if err := book("Heidi", false); err != nil {
		return fmt.Errorf("Heidi's booking: %w", err)
	}
	if n, err := db.count(ctx, "5"); err != nil || n != 1 {
		return fmt.Errorf("table 5 after the commit: %d bookings (%v), want Heidi's", n, err)
	}
	if err := locks.New(other).Table("5").TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		return fmt.Errorf("table 5's lock after the commit: %w", err)
	}
	fmt.Fprintln(w, "   result: table 5 has Heidi's booking only; the lock was free again after the rollback and after the commit.")
	return nil
}

// pgDatabase is the booking store in PostgreSQL. Its writes are guarded by
// nothing but the lock (there is no unique constraint on purpose).
type pgDatabase struct{ pool *pgxpool.Pool }

func (d *pgDatabase) reset(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lockkit_example_bookings (table_id text NOT NULL, guest text NOT NULL);
		ALTER TABLE lockkit_example_bookings ADD COLUMN IF NOT EXISTS id bigserial, ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;
		DELETE FROM lockkit_example_bookings WHERE table_id IN ('12', '13', '3', '5')`)
	return err
}

func (d *pgDatabase) book(ctx context.Context, table, guest string, fence int64) (bool, string, error) {
	var holder string
	err := d.pool.QueryRow(ctx, `SELECT guest FROM lockkit_example_bookings WHERE table_id = $1 LIMIT 1`, table).Scan(&holder)
	switch {
	case err == nil:
		return false, holder, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, "", err
	}
	time.Sleep(writeDelay)
	if _, err := d.pool.Exec(ctx, `INSERT INTO lockkit_example_bookings (table_id, guest, fence) VALUES ($1, $2, $3)`, table, guest, fence); err != nil {
		return false, "", err
	}
	return true, guest, nil
}

// booking is the last booking written for table, and its fence.
func (d *pgDatabase) booking(ctx context.Context, table string) (string, int64, error) {
	var guest string
	var fence int64
	err := d.pool.QueryRow(ctx, `SELECT guest, fence FROM lockkit_example_bookings WHERE table_id = $1 ORDER BY id DESC LIMIT 1`, table).Scan(&guest, &fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	return guest, fence, err
}

func (d *pgDatabase) count(ctx context.Context, table string) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM lockkit_example_bookings WHERE table_id = $1`, table).Scan(&n)
	return n, err
}
