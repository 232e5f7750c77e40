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

// LeaseTable is the table that holds each held lock's lease record: its
// token and its expiry on the server's clock (the lock-delay record).
const LeaseTable = "lockkit_leases"

// MigrationSQL creates the fence table and the lease table. Migrate runs it;
// a schema migration tool can run it instead. The tables are never created
// implicitly: an acquire without them fails with an error that names
// Migrate.
//
// The names are unqualified, so they resolve through the search_path of the
// sessions that take locks. In lockkit_fences, fence is the last fence
// issued for key. In lockkit_leases, id is a lock id (KeyID), token the
// lease that holds it or held it last, and expires the server time until
// which that lease may be valid on its client: a new holder of id is not
// granted before it (lock-delay), unless the lease was released (its row
// deleted).
const MigrationSQL = `CREATE TABLE IF NOT EXISTS lockkit_fences (
	key   text   PRIMARY KEY,
	fence bigint NOT NULL CHECK (fence > 0)
);
CREATE TABLE IF NOT EXISTS lockkit_leases (
	id      bigint      PRIMARY KEY,
	token   text        NOT NULL,
	expires timestamptz NOT NULL
)`

// Execer runs a statement: *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and
// pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the fence and lease tables (MigrationSQL) if they do not
// exist. Run it once, explicitly, before the first acquire: lockkit never
// creates tables at run time.
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
		return fmt.Errorf("lockkit/pg: create tables %s and %s: %w", FenceTable, LeaseTable, err)
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
//   - r (leaseGrant, tryRecord) writes the lease record from "l WHERE
//     l.ok", and only over a record whose lease has expired (or none): an
//     earlier lease on the id that may still be valid on its client (its
//     session was ended by pg_terminate_backend or a crash, which freed the
//     lock) keeps the new holder out until its expiry (lock-delay). The
//     grant is the lock taken and the record written; a lock taken but not
//     granted is given back in the same statement (u in the queued forms,
//     tryGranted's last branch in the polling ones). In the queued forms g
//     is the grant; in the polling forms g is r's row, when there is one;
//   - the fence upsert's rows come from "g WHERE g.ok": when nothing was
//     granted it has no row to insert, so ON CONFLICT DO UPDATE never runs
//     and the fence is not bumped;
//   - set_config for the session's idle limit sits in a CASE on the grant in
//     the outer SELECT, so it runs only after, and only when, it was
//     granted (the polling form sets it either way: see sqlTry).
//
// The record's expiry is the server's clock when it was written + the TTL:
// later than the send from which the client counts its lease, so the
// client gives its lease up first. Its commit is durable (the statement is
// its own transaction, and syncLocal waits for the local disk), so it
// survives the crash it guards against. A contended attempt writes nothing.
//
// Fences are GREATEST(last + 1, the server's clock in µs): strictly
// increasing while the row survives (it is committed with the grant), and
// still increasing if the row is lost with a crash under synchronous_commit
// = off or a failover to a standby that missed it, as long as the server
// clock has moved on by more than the lost stretch.
var (
	fenceUpsert = `INSERT INTO lockkit_fences AS t (key, fence)
		SELECT $3, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM g WHERE g.ok
		ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence + 1, EXCLUDED.fence)
		RETURNING t.fence`

	// Who holds a key (ReadHolder): $1 classid, $2 objid, $3 key, $4 its
	// long-key row (FenceRowKey, or the key again), $5 its lock id. Held
	// means the advisory lock is granted and a lease record of the id is
	// unexpired: a session that keeps the lock past its record (a paused
	// backend, whose holder's lease has ended) leads nobody.
	sqlHolder = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 AND granted)
		AND EXISTS (SELECT 1 FROM lockkit_leases WHERE id = $5 AND expires > clock_timestamp()),
		coalesce((SELECT fence FROM lockkit_fences WHERE key = $3),
			(SELECT fence FROM lockkit_fences WHERE key = $4), 0)`

	// A session's idle limit and statement_timeout when the backend took
	// it, restored when it gives the session back (sqlRetire); its
	// statement_timeout is 0 from here on (saved).
	sqlSetting = `SELECT current_setting('idle_session_timeout'), ` + stmtTimeoutOff

	// sqlSetting's statement_timeout part, for a connection whose first
	// statement reads its idle limit itself (sqlWait).
	sqlNoStmtTimeout = `SELECT ` + stmtTimeoutOff

	// $1 key id, $2 the session's new idle_session_timeout (ms), or '' to
	// leave it, $3 token, $4 ttl (ms). Setting the idle limit whether or
	// not the lock is taken is harmless: it is only ever raised on a
	// session with locks, and an empty session holds nothing it could free.
	// Columns: granted, fence (0), the idle limit set, synchronous_commit.
	sqlTry = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_lock($1) AS ok
	), ` + tryRecord("$3", "$4") + `
	SELECT ` + tryGranted + `, 0::bigint,
		CASE WHEN $2::text <> '' THEN set_config('idle_session_timeout', $2, false) END, ` + syncLocalSet + `
	FROM l`

	// $1 key id, $2 idle_session_timeout (ms) or '', $3 key, $4 token, $5
	// ttl (ms). Columns as sqlTry's.
	sqlTryFence = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_lock($1) AS ok
	), ` + tryRecord("$4", "$5") + `, g AS (SELECT r.ok FROM r), f AS (` + fenceUpsert + `)
	SELECT ` + tryGranted + `, coalesce((SELECT f.fence FROM f), 0),
		CASE WHEN $2::text <> '' THEN set_config('idle_session_timeout', $2, false) END, ` + syncLocalSet + `
	FROM l`

	// Queued: PostgreSQL queues the waiters (FIFO) for at most lock_timeout,
	// set in w, which l reads from, so it is in force before the wait starts.
	// A wait that runs out is SQLSTATE 55P03 and aborts the statement: no
	// record, no fence, no setting changed. lock_timeout bounds the row
	// waits after the grant too (the record's, the fence's): a 55P03 from
	// one of those leaves the session holding the lock, which the backend
	// then drops (sqlWaitUnlock, or sqlRetire for a session of its own).
	// A waiter whose ctx ends is cancelled by pgx (a cancel request as it
	// closes the connection); client_connection_check_interval also ends
	// the wait of a client that died without one. Once it has the lock, d
	// sleeps (holding it, so the queue behind keeps its order) until an
	// earlier lease's record expires, if it does within the wait ($3 after
	// the statement's start); the record is written after d.
	// $1 key id, $2 idle_session_timeout (ms), $3 lock_timeout (ms), $4
	// token, $5 ttl (ms).
	sqlWait = `WITH w AS MATERIALIZED (
		SELECT set_config('lock_timeout', $3, true) AS lt,
			set_config('client_connection_check_interval', '100', true) AS cc
	), l AS MATERIALIZED (
		SELECT pg_advisory_lock($1)::text IS NOT NULL AS ok, current_setting('idle_session_timeout') AS prev
		FROM w WHERE w.lt IS NOT NULL
	), ` + lockDelay("$3") + `, ` + leaseGrantWait + `
	SELECT g.ok, l.prev, 0::bigint, ` + sqlWaited + `,
		CASE WHEN g.ok THEN set_config('idle_session_timeout', $2, false) END
	FROM l, g LEFT JOIN u ON true`

	// $1 key id, $2 idle_session_timeout (ms), $3 key, $4 lock_timeout (ms),
	// $5 token, $6 ttl (ms).
	sqlWaitFence = `WITH w AS MATERIALIZED (
		SELECT set_config('lock_timeout', $4, true) AS lt,
			set_config('client_connection_check_interval', '100', true) AS cc
	), l AS MATERIALIZED (
		SELECT pg_advisory_lock($1)::text IS NOT NULL AS ok, current_setting('idle_session_timeout') AS prev
		FROM w WHERE w.lt IS NOT NULL
	), ` + lockDelay("$4") + `, ` + leaseGrantWaitFence + `, f AS (` + fenceUpsert + `)
	SELECT g.ok, l.prev, coalesce((SELECT f.fence FROM f), 0), ` + sqlWaited + `,
		CASE WHEN g.ok THEN set_config('idle_session_timeout', $2, false) END
	FROM l, g LEFT JOIN u ON true`

	// How long, in µs rounded down, after the server received the
	// statement it granted the lock: the clock reading the record's expiry
	// was computed from. The send + this is no later than that reading, so
	// the client's deadline is no later than the record's expiry, and no
	// later than the statement's end on the server, when its idle clock
	// starts.
	sqlWaited = `coalesce(floor(extract(epoch FROM g.at - statement_timestamp()) * 1000000)::bigint, 0)`

	// A session's check (Extend): moves the record of each lease that
	// asked ($2 ids, $3 tokens, $4 ttls in ms, parallel arrays) forward
	// to now + its ttl, if the session still holds its lock (pg_locks,
	// rather than "the session answers", so a lock gone any other way is
	// reported too) and the record is still the lease's; it returns the ids
	// renewed, then the ids of every advisory lock the session holds (so
	// the leases that did not ask learn whether theirs is gone), and raises
	// the session's idle limit when $1 (ms) is not ''.
	sqlCheck = `WITH h AS MATERIALIZED (
		SELECT (classid::int8 << 32) | objid::int8 AS id FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1
	), ` + syncLocal + `, x AS (UPDATE lockkit_leases AS t
		SET expires = GREATEST(t.expires, clock_timestamp() + a.ms * interval '1 millisecond')
		FROM unnest($2::int8[], $3::text[], $4::int8[]) AS a(id, token, ms), sc
		WHERE t.id = a.id AND t.token = a.token AND a.id IN (SELECT h.id FROM h)
		RETURNING t.id)
	SELECT coalesce((SELECT array_agg(x.id) FROM x), '{}'),
		coalesce((SELECT array_agg(h.id) FROM h), '{}'),
		CASE WHEN $1::text <> '' THEN set_config('idle_session_timeout', $1, false) END`

	// Release: $1 key id, $2 token. The record goes first (so a new holder
	// that finds the lock free finds no record, or waits on the row until
	// this commits), then the lock: the unlock reads d's count. Its commit
	// need not wait for the disk: a deletion lost in a crash leaves a record
	// that only delays the next holder to the lease's expiry (set_config
	// runs before the commit, wherever it sits in the statement).
	// Columns: unlocked, synchronous_commit.
	sqlUnlock = `WITH d AS (DELETE FROM lockkit_leases WHERE id = $1 AND token = $2 RETURNING 1)
	SELECT pg_advisory_unlock($1), set_config('synchronous_commit', 'off', true) FROM (SELECT count(*) FROM d) n`

	// A wait that failed with lock_timeout (SQLSTATE 55P03), on a
	// connection new to the backend: the lock may have been granted before
	// the timeout (which came from a row wait after it), and a session lock
	// outlives the aborted statement. Unlock it if the session holds it
	// (pg_advisory_unlock of a lock not held logs a warning). $1 key id,
	// $2 classid, $3 objid.
	sqlWaitUnlock = `SELECT count(pg_advisory_unlock($1)) FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
			AND objsubid = 1 AND classid = $2::oid AND objid = $3::oid`

	// A session given back to the pool: drop any advisory lock it might
	// hold, and restore its idle limit ($1) and statement_timeout ($2).
	sqlRetire = `SELECT pg_advisory_unlock_all()::text, set_config('idle_session_timeout', $1, false),
		set_config('statement_timeout', $2, false)`

	// Transaction-scoped: $1 key id, $2 idle_in_transaction_session_timeout
	// (ms), set locally (until the transaction ends).
	sqlTx = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_xact_lock($1) AS ok
	), ` + txGrant + `
	SELECT g.ok, 0::bigint,
		CASE WHEN g.ok THEN set_config('idle_in_transaction_session_timeout', $2, true) END
	FROM g`

	// $1 key id, $2 idle_in_transaction_session_timeout (ms), $3 key.
	sqlTxFence = `WITH l AS MATERIALIZED (
		SELECT pg_try_advisory_xact_lock($1) AS ok
	), ` + txGrant + `, f AS (` + fenceUpsert + `)
	SELECT g.ok, coalesce((SELECT f.fence FROM f), 0),
		CASE WHEN g.ok THEN set_config('idle_in_transaction_session_timeout', $2, true) END
	FROM g`

	// A transaction's lease record, written (at grant) or moved forward (at
	// each extend) over another connection: $1 server pid, $2 classid, $3
	// objid, $4 the longest idle time (ms) allowed, $5 key id, $6 token, $7
	// ttl (ms). Written only while the transaction holds the lock and has
	// not sat idle too long (a session whose activity this role cannot see,
	// state NULL, is judged by its lock alone), and only over a record that
	// is the lease's own or has expired. It returns whether it was.
	sqlTxLease = `WITH h AS MATERIALIZED (
		SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND objsubid = 1 AND classid = $2::oid AND objid = $3::oid AND pid = $1)
			AND coalesce((SELECT coalesce(state NOT LIKE 'idle in transaction%' OR
					clock_timestamp() - state_change <= ($4::text || ' ms')::interval, true)
				FROM pg_stat_activity WHERE pid = $1), false) AS ok
	), ` + syncLocal + `, r AS (INSERT INTO lockkit_leases AS t (id, token, expires)
		SELECT $5, $6, clock_timestamp() + $7::bigint * interval '1 millisecond' FROM h, sc WHERE h.ok
		ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, expires = GREATEST(t.expires, EXCLUDED.expires)
			WHERE t.token = EXCLUDED.token OR t.expires <= clock_timestamp()
		RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM r)`

	// Whether server process $1 still runs (pg_stat_activity lists every
	// backend's pid to every user).
	sqlProcessAlive = `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int)`

	// A lease record dropped by its token, with no lock to give back: a
	// transaction's once the transaction has ended (TxDrop), or one that a
	// grant nobody holds left behind (Release of a token the backend holds
	// no lease for). $1 key id, $2 token. As in sqlUnlock, its commit need
	// not wait for the disk.
	sqlDropRecord = `WITH c AS MATERIALIZED (
		SELECT set_config('synchronous_commit', 'off', true) AS v
	) DELETE FROM lockkit_leases WHERE id = $1 AND token = $2 AND (SELECT c.v FROM c) IS NOT NULL`
)

// leaseGrant is the lock-delay part of a session acquire (see above): tok
// and ms are the token's and the ttl's parameters, and from is what the
// record's row is selected from (l, or l after the lock-delay's sleep). at
// is the server's clock when the expiry was computed.
func leaseGrant(tok, ms, from string) string {
	return syncLocal + `, r AS (INSERT INTO lockkit_leases AS t (id, token, expires)
		SELECT $1, ` + tok + `, clock_timestamp() + ` + ms + `::bigint * interval '1 millisecond' FROM ` + from + `, sc WHERE l.ok
		ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, expires = EXCLUDED.expires
			WHERE t.expires <= clock_timestamp()
		RETURNING t.expires - ` + ms + `::bigint * interval '1 millisecond' AS at
	), g AS MATERIALIZED (
		SELECT l.ok AND EXISTS (SELECT 1 FROM r) AS ok, l.ok AS took, (SELECT r.at FROM r) AS at FROM l
	), u AS (
		SELECT pg_advisory_unlock($1) AS x FROM g WHERE g.took AND NOT g.ok
	)`
}

// syncLocal makes a statement that writes lease records commit durably on
// this server whatever synchronous_commit the session has: 'local' waits for
// the local disk (a record must survive a crash), not for synchronous
// standbys (a grant must not hang on a standby that is down; a failover
// ends every session anyway, and the fences order the writes across it).
const syncLocal = `sc AS MATERIALIZED (SELECT ` + syncLocalSet + ` AS v)`

// syncLocalSet is syncLocal's setting as an expression: in the target list
// of a statement's one-row outer SELECT it runs before the statement's
// commit, which is all it needs (sqlTry).
const syncLocalSet = `set_config('synchronous_commit', 'local', true)`

// tryRecord is the lock-delay part of a polling acquire (sqlTry,
// sqlTryFence): r writes the lease record (tok, ms: the token's and the
// ttl's parameters) from "l WHERE l.ok", over no record or an expired one,
// and returns a row (ok) when it did: the grant. It is leaseGrant without
// the sleep's clock reading (at) and with the grant's decision left to
// tryGranted, so the statement has two CTEs where leaseGrant has four
// (issue 24: measured in docs/benchmarks.md, "PostgreSQL").
func tryRecord(tok, ms string) string {
	return `r AS (INSERT INTO lockkit_leases AS t (id, token, expires)
		SELECT $1, ` + tok + `, clock_timestamp() + ` + ms + `::bigint * interval '1 millisecond' FROM l WHERE l.ok
		ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, expires = EXCLUDED.expires
			WHERE t.expires <= clock_timestamp()
		RETURNING true AS ok
	)`
}

// tryGranted is a polling acquire's grant, in its outer SELECT over l: not
// when the lock was not taken; when r wrote the record (EXISTS reads r to
// its end, so the insert has run); otherwise the lock is given back and
// the answer is false (pg_advisory_unlock is never NULL). CASE evaluates
// its branches in order and only as far as needed (documented), and the
// unlock is volatile, so the planner cannot fold it away.
const tryGranted = `CASE WHEN NOT l.ok THEN false WHEN EXISTS (SELECT 1 FROM r) THEN true
		ELSE pg_advisory_unlock($1) IS NULL END`

// txGrant is the grant of a transaction-scoped lock: the lock alone. The
// lease's record is written after, over another connection (sqlTxLease,
// which refuses while another lease's record is unexpired: the lock-delay),
// as a record written in the transaction would vanish with it; and read
// there, not here, where a repeatable-read transaction's snapshot could
// hide a newer record.
const txGrant = `g AS MATERIALIZED (SELECT l.ok FROM l)`

// lockDelay sleeps, once the lock is taken, until an earlier lease's record
// expires, for at most wait ms (a parameter) after the statement's start.
// The record is read FOR UPDATE: a waiter's snapshot is as old as its wait,
// and the lock reads the row's latest version instead, so a record deleted
// by a release while this statement waited is not slept on. A record
// inserted while it waited is not seen at all (a predecessor granted then,
// whose session ended): r then finds it unexpired and the lock is given
// back, and AcquireWait sends the statement again, with a fresh snapshot.
func lockDelay(wait string) string {
	return `e AS MATERIALIZED (
		SELECT e.expires FROM lockkit_leases e WHERE e.id = $1 AND (SELECT l.ok FROM l) FOR UPDATE OF e
	), d AS MATERIALIZED (
		SELECT pg_sleep(extract(epoch FROM least(e.expires,
			statement_timestamp() + ` + wait + `::text::bigint * interval '1 millisecond') - clock_timestamp())) AS z
		FROM e WHERE e.expires > clock_timestamp()
	)`
}

// stmtTimeoutOff reads a session's statement_timeout and sets it to 0 for
// the session (sqlSetting, sqlNoStmtTimeout).
const stmtTimeoutOff = `current_setting('statement_timeout'), set_config('statement_timeout', '0', false)`

var (
	leaseGrantWait      = leaseGrant("$4", "$5", "l, (SELECT count(*) FROM d) dn")
	leaseGrantWaitFence = leaseGrant("$5", "$6", "l, (SELECT count(*) FROM d) dn")
)

// Keys longer than FenceKeyMax bytes may not fit a btree row of the fence
// table's primary key (about 2.7 kB on 8 kB pages, after compression), so
// their fence row is found this way instead, in the same statement:
//
//   - fg: if a row keyed by the full key exists (a v0.1.0 process, or this
//     one, wrote it because the key compressed small enough), it is bumped,
//     also above the hashed row's fence if there is one;
//   - fh: otherwise the row keyed by FenceRowKey(key) (SHA-256) is upserted
//     with the usual rule.
//
// Both rows are only written under the key's lock, so one holder at a time
// chooses; a key v0.1.0 could store keeps its full-key row, and a key it
// could not store never had one.
func fenceLong(h string) string {
	return `fg AS (UPDATE lockkit_fences AS t SET fence = GREATEST(t.fence + 1,
			(extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
			coalesce((SELECT s.fence + 1 FROM lockkit_fences s WHERE s.key = ` + h + `), 0))
		FROM g WHERE g.ok AND t.key = $3
		RETURNING t.fence
	), fh AS (INSERT INTO lockkit_fences AS t (key, fence)
		SELECT ` + h + `, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM g WHERE g.ok AND NOT EXISTS (SELECT 1 FROM fg)
		ON CONFLICT (key) DO UPDATE SET fence = GREATEST(t.fence + 1, EXCLUDED.fence)
		RETURNING t.fence
	), f AS (SELECT fg.fence FROM fg UNION ALL SELECT fh.fence FROM fh)`
}

// The long-key forms of the fencing statements: the fence CTE replaced by
// fenceLong, with the hashed row key as one more parameter at the end.
var (
	sqlTryFenceLong  = longForm(sqlTryFence, "$6")
	sqlWaitFenceLong = longForm(sqlWaitFence, "$7")
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

// ttlMs is a ttl in whole milliseconds, rounded up, as a number: a lease
// record never expires before the Client's deadline.
func ttlMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// ttlString is a ttl in whole milliseconds, rounded up: the server's limit
// is never shorter than the Client's.
func ttlString(d time.Duration) string {
	return strconv.FormatInt(ttlMs(d), 10)
}

// wrapTableErr explains the error of an acquire that found no fence or
// lease table (SQLSTATE 42P01 undefined_table).
func wrapTableErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("lockkit/pg: locks need the %s and %s tables, which do not both exist in this database (search_path): "+
			"create them once with pgbackend.Migrate(ctx, pool) or the SQL in pgbackend.MigrationSQL: %w", FenceTable, LeaseTable, err)
	}
	return err
}
