#!/usr/bin/env bash
# pgbench-lease.sh: what a lease record costs at the SQL level, interleaved.
#
#   scripts/pgbench-lease.sh [-T SECONDS] [pgbench connection options...]
#
# e.g. scripts/pgbench-lease.sh -T 30 -h 127.0.0.1 -p 54329 -U postgres postgres
#
# Runs one pgbench client (-n -M prepared) over a set of scripts, each one
# acquire + release of its own advisory lock id, picked at random for every
# transaction, so that a shared machine's drift hits all of them alike, and
# prints each script's average latency and its ratio to the floor's. The
# database needs lockkit's tables (postgres.MigrationSQL; created here if
# missing, with the kept rows some scripts update). The scripts, with the ids,
# tokens and ttl written in as literals:
#
#   floor    pg_try_advisory_lock + pg_advisory_unlock (the issue's floor)
#   old      the backend's statements before issue 24's change (0301faa)
#   lockkit  the backend's statements (internal/pgbackend sqlTry, sqlUnlock)
#   kept     lockkit with the record kept: the grant's upsert over a row
#            released by an UPDATE to -infinity (HOT), not deleted
#   minimal  the least a record can cost: a plain INSERT (no conflict check,
#            no expiry), a DELETE by id, the same commit modes
#   onewrite lock + UPDATE of a kept row (committed); a plain unlock
#   readonly lock + an indexed read of the lease table; a plain unlock
#
# minimal, onewrite and readonly are not lockkit's rules: they bound what a
# statement shape, or a design with fewer writes, could cost
# (docs/benchmarks.md, "PostgreSQL").
set -euo pipefail

secs=30
if [ "${1:-}" = "-T" ]; then
	secs=$2
	shift 2
fi
command -v pgbench >/dev/null || PATH=$PATH:/usr/lib/postgresql/15/bin
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

psql -X -q -v ON_ERROR_STOP=1 "$@" <<'EOF'
SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS lockkit_fences (key text PRIMARY KEY, fence bigint NOT NULL CHECK (fence > 0));
CREATE TABLE IF NOT EXISTS lockkit_leases (id bigint PRIMARY KEY, token text NOT NULL, expires timestamptz NOT NULL);
DELETE FROM lockkit_leases WHERE id BETWEEN 900001 AND 900007;
INSERT INTO lockkit_leases VALUES (900004, 'tok', '-infinity'), (900006, 'tok', '-infinity');
EOF

cat >"$dir/floor.sql" <<'EOF'
SELECT pg_try_advisory_lock(900001::bigint);
SELECT pg_advisory_unlock(900001::bigint);
EOF
cat >"$dir/old.sql" <<'EOF'
WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(900002::bigint) AS ok), sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'local', true) AS v), r AS (INSERT INTO lockkit_leases AS t (id, token, expires) SELECT 900002, 'tok', clock_timestamp() + 10000::bigint * interval '1 millisecond' FROM l, sc WHERE l.ok ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, expires = EXCLUDED.expires WHERE t.expires <= clock_timestamp() RETURNING t.expires - 10000::bigint * interval '1 millisecond' AS at), g AS MATERIALIZED (SELECT l.ok AND EXISTS (SELECT 1 FROM r) AS ok, l.ok AS took, (SELECT r.at FROM r) AS at FROM l), u AS (SELECT pg_advisory_unlock(900002::bigint) AS x FROM g WHERE g.took AND NOT g.ok) SELECT g.ok, 0::bigint, CASE WHEN ''::text <> '' THEN set_config('idle_session_timeout', '', false) END FROM g LEFT JOIN u ON true;
WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS v), d AS (DELETE FROM lockkit_leases WHERE id = 900002 AND token = 'tok' RETURNING 1) SELECT pg_advisory_unlock(900002::bigint) FROM (SELECT count(*) FROM d) n, c;
EOF
grant() { # $1 id
	echo "WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1::bigint) AS ok), r AS (INSERT INTO lockkit_leases AS t (id, token, expires) SELECT $1, 'tok', clock_timestamp() + 10000::bigint * interval '1 millisecond' FROM l WHERE l.ok ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, expires = EXCLUDED.expires WHERE t.expires <= clock_timestamp() RETURNING true AS ok) SELECT CASE WHEN NOT l.ok THEN false WHEN EXISTS (SELECT 1 FROM r) THEN true ELSE pg_advisory_unlock($1::bigint) IS NULL END, 0::bigint, CASE WHEN ''::text <> '' THEN set_config('idle_session_timeout', '', false) END, set_config('synchronous_commit', 'local', true) FROM l;"
}
{
	grant 900003
	echo "WITH d AS (DELETE FROM lockkit_leases WHERE id = 900003 AND token = 'tok' RETURNING 1) SELECT pg_advisory_unlock(900003::bigint), set_config('synchronous_commit', 'off', true) FROM (SELECT count(*) FROM d) n;"
} >"$dir/lockkit.sql"
{
	grant 900004
	echo "WITH d AS (UPDATE lockkit_leases SET expires = '-infinity' WHERE id = 900004 AND token = 'tok' RETURNING 1) SELECT pg_advisory_unlock(900004::bigint), set_config('synchronous_commit', 'off', true) FROM (SELECT count(*) FROM d) n;"
} >"$dir/kept.sql"
cat >"$dir/minimal.sql" <<'EOF'
WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(900005::bigint) AS ok), r AS (INSERT INTO lockkit_leases (id, token, expires) SELECT 900005, 'tok', now() FROM l WHERE l.ok RETURNING 1) SELECT count(*), set_config('synchronous_commit', 'local', true) FROM r;
WITH d AS (DELETE FROM lockkit_leases WHERE id = 900005 RETURNING 1) SELECT pg_advisory_unlock(900005::bigint), set_config('synchronous_commit', 'off', true) FROM (SELECT count(*) FROM d) n;
EOF
cat >"$dir/onewrite.sql" <<'EOF'
WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(900006::bigint) AS ok), r AS (UPDATE lockkit_leases t SET token = 'tok', expires = '-infinity' FROM l WHERE l.ok AND t.id = 900006 RETURNING 1) SELECT l.ok AND EXISTS (SELECT 1 FROM r), set_config('synchronous_commit', 'local', true) FROM l;
SELECT pg_advisory_unlock(900006::bigint);
EOF
cat >"$dir/readonly.sql" <<'EOF'
SELECT pg_try_advisory_lock(900007::bigint) AND NOT EXISTS (SELECT 1 FROM lockkit_leases WHERE id = 900007 AND expires > clock_timestamp());
SELECT pg_advisory_unlock(900007::bigint);
EOF

names=(floor old lockkit kept minimal onewrite readonly)
args=()
for n in "${names[@]}"; do
	args+=(-f "$dir/$n.sql")
done
pgbench -n -M prepared -T "$secs" "${args[@]}" "$@" 2>&1 |
	awk -v names="${names[*]}" '
		BEGIN { split(names, name, " ") }
		/^SQL script [0-9]+:/ { s = $3 + 0 }
		s && /latency average/ { lat[s] = $5; s = 0 }
		END {
			for (i = 1; i in name; i++)
				printf "%-9s %s ms  %.2fx\n", name[i], lat[i], lat[i] / lat[1]
		}'
