package pgbackend

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FenceTable is the table that holds each key's last fence.
const FenceTable = "lockkit_fences"

// MigrationSQL creates the fence table. Migrate runs it; a schema migration
// tool can run it instead. The table is never created implicitly: a fencing
// acquire without it fails with an error that names Migrate.
//
// The name is unqualified, so it resolves through the search_path of the
// sessions that take locks; fence is the last fence issued for key.
const MigrationSQL = `CREATE TABLE IF NOT EXISTS lockkit_fences (
	key   text   PRIMARY KEY,
	fence bigint NOT NULL CHECK (fence > 0)
)`

// Execer runs a statement: *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and
// pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the fence table (MigrationSQL) if it does not exist. Run it
// once, explicitly, before the first fencing acquire: lockkit never creates
// tables at run time.
func Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return errors.New("lockkit/pg: Migrate: nil database handle")
	}
	if v := reflect.ValueOf(db); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("lockkit/pg: Migrate: the database handle is a nil %T", db)
	}
	if p, ok := db.(*pgxpool.Pool); ok && !madePool(p) {
		return errors.New("lockkit/pg: Migrate: the pgxpool.Pool was not made by pgxpool.New or NewWithConfig (a zero Pool)")
	}
	if _, err := db.Exec(ctx, MigrationSQL); err != nil {
		return fmt.Errorf("lockkit/pg: create fence table %s: %w", FenceTable, err)
	}
	return nil
}

// KeyID is the advisory lock id (pg_locks: classid = KeyID>>32, objid =
// KeyID&0xffffffff, objsubid = 1) that key is locked under: the first 8 bytes
// of SHA-256(key), big-endian, as a signed 64-bit integer. It is stable
// across processes, versions and platforms.
//
// Two keys may share an id (about n²/2⁶⁵ for n keys in use at once: one in
// ten million for a million keys). A collision can only make those two keys
// wait on each other, as if they were one lock; it never lets both be held
// at once, and their fences stay separate (the fence table is keyed by the
// full key). The same goes for an id shared with another program's bigint
// advisory locks in the same database.
func KeyID(key string) int64 {
	sum := sha256.Sum256([]byte(key))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// The statements. Each acquire is one statement, so one round trip, and its
// parts are ordered by data dependencies, never by the evaluation order of
// sibling CTEs or of a target list (which PostgreSQL does not promise):
//
//   - l (MATERIALIZED, and volatile: evaluated exactly once) tries the lock;
//   - the fence upsert's rows come from "l WHERE l.ok": when the lock was not
//     taken it has no row to insert, so ON CONFLICT DO UPDATE never runs and
//     the fence is not bumped;
//   - set_config for the session's idle limit sits in a CASE on l.ok in the
//     outer SELECT, so it runs only after, and only when, the lock was taken;
//     a contended attempt leaves the session as it found it.
//
// Fences are GREATEST(last + 1, the server's clock in µs): strictly
// increasing while the row survives (it is committed with the grant), and
// still increasing if the row is lost with a crash under synchronous_commit
// = off or a failover to a standby that missed it, as long as the server
// clock has moved on by more than the lost stretch.
const (
	fenceUpsert = `INSERT INTO lockkit_fences AS t (key, fence)
		SELECT $3, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM l WHERE l.ok
		ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence + 1, EXCLUDED.fence)
		RETURNING t.fence`

	// Who holds a key (ReadHolder): $1 classid, $2 objid, $3 key, $4 its
	// long-key row (FenceRowKey, or the key again).
	sqlHolder = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted),
		coalesce((SELECT fence FROM lockkit_fences WHERE key = $3),
			(SELECT fence FROM lockkit_fences WHERE key = $4), 0)`

	// A session's idle limit when the backend took it, restored when it
	// gives the session back.
	sqlSetting = `SELECT current_setting('idle_session_timeout')`

	// $1 key id, $2 the session's new idle_session_timeout (ms), or '' to
	// leave it. Setting it whether or not the lock is taken is harmless: it
	// is only ever raised on a session with locks, and an empty session
	// holds nothing it could free.
	sqlTry = `SELECT pg_try_advisory_lock($1), 0::bigint,
		CASE WHEN $2::text <> '' THEN set_config('idle_session_timeout', $2, false) END`

	// $1 key id, $2 idle_session_timeout (ms) or '', $3 key.
	sqlTryFence = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_lock($1) AS ok
	), f AS (` + fenceUpsert + `)
	SELECT l.ok, coalesce((SELECT f.fence FROM f), 0),
		CASE WHEN $2::text <> '' THEN set_config('idle_session_timeout', $2, false) END
	FROM l`

	// Queued: PostgreSQL queues the waiters (FIFO) for at most lock_timeout,
	// set in w, which l reads from, so it is in force before the wait starts.
	// A wait that runs out is SQLSTATE 55P03 and aborts the statement: no
	// lock, no fence, no setting changed. A waiter whose ctx ends is
	// cancelled by pgx (a cancel request as it closes the connection);
	// client_connection_check_interval also ends the wait of a client that
	// died without one.
	// $1 key id, $2 idle_session_timeout (ms), $3 lock_timeout (ms).
	sqlWait = `WITH w AS MATERIALIZED (
		SELECT set_config('lock_timeout', $3, true) AS lt,
			set_config('client_connection_check_interval', '100', true) AS cc
	), l AS MATERIALIZED (
		SELECT pg_advisory_lock($1)::text IS NOT NULL AS ok, current_setting('idle_session_timeout') AS prev
		FROM w WHERE w.lt IS NOT NULL
	)
	SELECT l.ok, l.prev, 0::bigint, ` + sqlWaited + `,
		CASE WHEN l.ok THEN set_config('idle_session_timeout', $2, false) END
	FROM l`

	// $1 key id, $2 idle_session_timeout (ms), $3 key, $4 lock_timeout (ms).
	sqlWaitFence = `WITH w AS MATERIALIZED (
		SELECT set_config('lock_timeout', $4, true) AS lt,
			set_config('client_connection_check_interval', '100', true) AS cc
	), l AS MATERIALIZED (
		SELECT pg_advisory_lock($1)::text IS NOT NULL AS ok, current_setting('idle_session_timeout') AS prev
		FROM w WHERE w.lt IS NOT NULL
	), f AS (` + fenceUpsert + `)
	SELECT l.ok, l.prev, coalesce((SELECT f.fence FROM f), 0), ` + sqlWaited + `,
		CASE WHEN l.ok THEN set_config('idle_session_timeout', $2, false) END
	FROM l`

	// How long, in µs rounded down, after the server received the
	// statement it got past the lock (read in the outer SELECT, after l):
	// the send + this is no later than the statement's end on the server,
	// when its idle clock starts.
	sqlWaited = `floor(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::bigint`

	// A session's check (Extend): the advisory locks it holds, as parallel
	// arrays of classid and objid (one aggregation, so the pairs line up),
	// from pg_locks rather than "the session answers", so a lock gone any
	// other way is reported too; and its idle limit raised when $1 (ms) is
	// not ''.
	sqlCheck = `SELECT h.c, h.o, CASE WHEN $1::text <> '' THEN set_config('idle_session_timeout', $1, false) END
	FROM (SELECT coalesce(array_agg(classid::int8), '{}') AS c, coalesce(array_agg(objid::int8), '{}') AS o
		FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1) h`

	// Release: $1 key id.
	sqlUnlock = `SELECT pg_advisory_unlock($1)`

	// A session given back to the pool: drop any advisory lock it might
	// hold, and restore its idle limit ($1).
	sqlRetire = `SELECT pg_advisory_unlock_all()::text, set_config('idle_session_timeout', $1, false)`

	// Transaction-scoped: $1 key id, $2 idle_in_transaction_session_timeout
	// (ms), set locally (until the transaction ends).
	sqlTx = `SELECT l.ok, 0::bigint,
		CASE WHEN l.ok THEN set_config('idle_in_transaction_session_timeout', $2, true) END
	FROM (SELECT pg_try_advisory_xact_lock($1) AS ok OFFSET 0) l`

	// $1 server pid, $2 classid, $3 objid, $4 the longest idle time (ms)
	// allowed. A session whose activity this role cannot see (state NULL)
	// is judged by its lock alone.
	sqlTxHeld = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND objsubid = 1 AND classid = $2::oid AND objid = $3::oid AND pid = $1)
		AND coalesce((SELECT coalesce(state NOT LIKE 'idle in transaction%' OR
				clock_timestamp() - state_change <= ($4::text || ' ms')::interval, true)
			FROM pg_stat_activity WHERE pid = $1), false)`

	// $1 key id, $2 idle_in_transaction_session_timeout (ms), $3 key.
	sqlTxFence = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_xact_lock($1) AS ok
	), f AS (` + fenceUpsert + `)
	SELECT l.ok, coalesce((SELECT f.fence FROM f), 0),
		CASE WHEN l.ok THEN set_config('idle_in_transaction_session_timeout', $2, true) END
	FROM l`
)

// Keys longer than FenceKeyMax bytes may not fit a btree row of the fence
// table's primary key (about 2.7 kB on 8 kB pages, after compression), so
// their fence row is found this way instead, in the same statement:
//
//   - g: if a row keyed by the full key exists (a v0.1.0 process, or this
//     one, wrote it because the key compressed small enough), it is bumped,
//     also above the hashed row's fence if there is one;
//   - h: otherwise the row keyed by FenceRowKey(key) (SHA-256) is upserted
//     with the usual rule.
//
// Both rows are only written under the key's lock, so one holder at a time
// chooses; a key v0.1.0 could store keeps its full-key row, and a key it
// could not store never had one.
func fenceLong(h string) string {
	return `g AS (UPDATE lockkit_fences AS t SET fence = GREATEST(t.fence + 1,
			(extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
			coalesce((SELECT s.fence + 1 FROM lockkit_fences s WHERE s.key = ` + h + `), 0))
		FROM l WHERE l.ok AND t.key = $3
		RETURNING t.fence
	), h AS (INSERT INTO lockkit_fences AS t (key, fence)
		SELECT ` + h + `, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM l WHERE l.ok AND NOT EXISTS (SELECT 1 FROM g)
		ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence + 1, EXCLUDED.fence)
		RETURNING t.fence
	), f AS (SELECT g.fence FROM g UNION ALL SELECT h.fence FROM h)`
}

// The long-key forms of the fencing statements: the fence CTE replaced by
// fenceLong, with the hashed row key as one more parameter at the end.
var (
	sqlTryFenceLong  = longForm(sqlTryFence, "$4")
	sqlWaitFenceLong = longForm(sqlWaitFence, "$5")
	sqlTxFenceLong   = longForm(sqlTxFence, "$4")
)

func longForm(stmt, h string) string {
	short := "f AS (" + fenceUpsert + ")"
	if strings.Count(stmt, short) != 1 {
		panic("pgbackend: fencing statement without its fence upsert") // a bug in this file, caught by any test
	}
	return strings.Replace(stmt, short, fenceLong(h), 1)
}

// FenceKeyMax is the longest key whose fence row is keyed by the key itself,
// as in v0.1.0. A longer key uses its full-key row if one exists, and
// otherwise the row keyed by FenceRowKey(key).
const FenceKeyMax = 2600

// FenceRowKey is the fence table key of a key longer than FenceKeyMax that
// has no full-key row: "lockkit:sha256:" and the hex SHA-256 of key. Should a
// real key be equal to it, the two keys share one fence counter, which keeps
// each key's fences increasing.
func FenceRowKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "lockkit:sha256:" + hex.EncodeToString(sum[:])
}

// fenceQuery is the fencing statement for key: short as it is, or, for a
// key over FenceKeyMax, its long form with FenceRowKey(key) appended to args.
func fenceQuery(key, short, long string, args []any) (string, []any) {
	if len(key) <= FenceKeyMax {
		return short, args
	}
	return long, append(args, FenceRowKey(key))
}

// lockIDs splits a key id the way pg_locks shows it.
func lockIDs(id int64) (classid, objid uint32) {
	return uint32(uint64(id) >> 32), uint32(uint64(id))
}

// maxTTL is the largest idle limit PostgreSQL accepts (INT_MAX ms, about 24.8 days).
const maxTTL = time.Duration(1<<31-1) * time.Millisecond

// checkKeyTTL rejects what no lock can be taken with.
func checkKeyTTL(key string, ttl time.Duration) error {
	switch {
	case key == "":
		return errors.New("lockkit/pg: empty lock key")
	case ttl <= 0:
		return fmt.Errorf("lockkit/pg: ttl %v is not positive", ttl)
	case ttl < time.Millisecond:
		return fmt.Errorf("lockkit/pg: ttl %v is under a millisecond, the unit of PostgreSQL's idle limits", ttl)
	case ttl > maxTTL-time.Millisecond:
		return fmt.Errorf("lockkit/pg: ttl %v is over %v, the largest idle limit PostgreSQL accepts", ttl, maxTTL)
	}
	return nil
}

// msString is d in whole milliseconds, rounded down (a wait).
func msString(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// ttlString is a ttl in whole milliseconds, rounded up: the server's limit
// is never shorter than the Client's.
func ttlString(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// wrapFenceErr explains the error of a fencing acquire that found no fence
// table (SQLSTATE 42P01 undefined_table).
func wrapFenceErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("lockkit/pg: fencing needs the %s table, which does not exist in this database (search_path): "+
			"create it once with pgbackend.Migrate(ctx, pool) or the SQL in pgbackend.MigrationSQL: %w", FenceTable, err)
	}
	return err
}
