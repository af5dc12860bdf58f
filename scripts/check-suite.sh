#!/usr/bin/env bash
# A small test suite of a real program, for measuring what `memlens check` costs against running
# the suite bare (docs/check.md, docs/benchmarks.md): eight sqlite3 scripts, each in a process of
# its own — bulk inserts, an index, joins, grouping, window functions, JSON, recursive queries,
# a transaction rolled back — over deterministic data, each checking its own result.
#   bash scripts/check-suite.sh                          the suite, bare
#   memlens check --max-peak 1G --max-leak 1M -- bash scripts/check-suite.sh
# Exits non-zero when a script's result is not the expected one.
set -euo pipefail
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
N=${CHECK_SUITE_ROWS:-60000}

gen="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $N)"
cat >"$W/1-insert.sql" <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INT, v REAL);
$gen INSERT INTO t SELECT x, printf('name-%08d', (x * 7919) % $N), x % 97, x * 0.5 FROM c;
SELECT count(*) = $N FROM t;
EOF
cat >"$W/2-index.sql" <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INT);
$gen INSERT INTO t SELECT x, printf('name-%08d', (x * 7919) % $N), x % 97 FROM c;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp ON t(grp, name);
SELECT count(*) = 1 FROM t WHERE name = 'name-00000042';
EOF
cat >"$W/3-join.sql" <<EOF
CREATE TABLE a(id INTEGER PRIMARY KEY, k INT);
CREATE TABLE b(k INTEGER PRIMARY KEY, label TEXT);
$gen INSERT INTO a SELECT x, x % 1000 FROM c;
WITH RECURSIVE d(x) AS (SELECT 0 UNION ALL SELECT x+1 FROM d WHERE x < 999)
INSERT INTO b SELECT x, 'label ' || x FROM d;
SELECT count(*) = $N FROM a JOIN b USING (k);
EOF
cat >"$W/4-group.sql" <<EOF
CREATE TABLE t(grp INT, v REAL);
$gen INSERT INTO t SELECT x % 97, x FROM c;
SELECT count(*) = 97 FROM (SELECT grp, sum(v), avg(v), group_concat(v) FROM t GROUP BY grp);
EOF
cat >"$W/5-window.sql" <<EOF
CREATE TABLE t(grp INT, v INT);
$gen INSERT INTO t SELECT x % 50, x FROM c;
SELECT max(r) = $N / 50 FROM (SELECT row_number() OVER (PARTITION BY grp ORDER BY v) AS r FROM t);
EOF
cat >"$W/6-json.sql" <<EOF
CREATE TABLE t(doc TEXT);
$gen INSERT INTO t SELECT json_object('id', x, 'tags', json_array('a', 'b', x % 7)) FROM c;
SELECT sum(json_extract(doc, '\$.tags[2]')) > 0 FROM t;
EOF
cat >"$W/7-recursive.sql" <<EOF
WITH RECURSIVE fib(n, a, b) AS (SELECT 1, 0, 1 UNION ALL SELECT n+1, b, (a+b) % 1000003 FROM fib WHERE n < $N)
SELECT count(*) = $N FROM fib;
EOF
cat >"$W/8-rollback.sql" <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT);
BEGIN;
$gen INSERT INTO t SELECT x, printf('%.200c', 'x') FROM c;
ROLLBACK;
SELECT count(*) = 0 FROM t;
EOF

for f in "$W"/*.sql; do
    got=$(sqlite3 :memory: <"$f")
    if [ "$got" != 1 ]; then
        echo "check-suite: $(basename "$f"): expected 1, got '$got'" >&2
        exit 1
    fi
done
echo "check-suite: 8 scripts passed"
