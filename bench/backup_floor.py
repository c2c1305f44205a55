"""The floor of ``clean --backup``: the least a backed-up clean must do, in a bare driver script.

    python bench/backup_floor.py ENGINE TARGET BATCH FILE      # TARGET: the SQLite file, or '-' and $BENCH_DB

Deletes the expired task keys in batches of BATCH rows, each in a transaction of its own that gets the deleted
rows' columns back (``DELETE ... RETURNING``; on PostgreSQL ``COPY (DELETE ... RETURNING ...) TO STDOUT``, the
text straight from the server), appends them to FILE as the driver gives them, fsyncs FILE and only then commits:
the data a backup must move and sync, without putting it in the export format. Prints the rows deleted.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from datetime import UTC, datetime

COLUMNS = "dag_id, run_id, task_id, map_index, {key}, updated_at, expires_at, value"  # {key}: quoted per engine


def main() -> None:
    engine, target, batch, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    columns = COLUMNS.format(key="`key`" if engine in ("mysql", "mariadb") else '"key"')
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    now = datetime.now(UTC)
    deleted, after = 0, 0
    if engine == "sqlite":
        con = sqlite3.connect(target, isolation_level=None)
        cutoff = now.strftime("%Y-%m-%d %H:%M:%S.%f")
        statement = (
            f"DELETE FROM task_state_store WHERE id IN (SELECT id FROM task_state_store WHERE id > ? AND "
            f"expires_at < ? ORDER BY id LIMIT ?) RETURNING id, {columns}"
        )
        while True:
            con.execute("BEGIN")
            rows = con.execute(statement, (after, cutoff, batch)).fetchall()
            os.write(out, "".join("\t".join(map(str, row)) + "\n" for row in rows).encode())
            os.fsync(out)
            con.execute("COMMIT")
            deleted += len(rows)
            if len(rows) < batch:
                break
            after = max(row[0] for row in rows)
    elif engine == "postgresql":
        import psycopg

        conn = psycopg.connect(**json.loads(os.environ["BENCH_DB"]))
        pick = (
            "SELECT array_agg(id), max(id) FROM (SELECT id FROM task_state_store WHERE id > %s AND expires_at < %s "
            "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) batch"
        )
        while True:
            ids, last = conn.execute(pick, (after, now, batch)).fetchone()
            count = 0
            if ids:
                cur = conn.cursor()
                copy_sql = f"COPY (DELETE FROM task_state_store WHERE id = ANY(%s) RETURNING {columns}) TO STDOUT"
                with cur.copy(copy_sql, (ids,)) as copy:
                    for block in copy:
                        os.write(out, block)
                count = len(ids)
                os.fsync(out)
            conn.commit()
            deleted += count
            if count < batch:
                break
            after = last
    else:
        import pymysql

        conn = pymysql.connect(**json.loads(os.environ["BENCH_DB"]))
        statement = (
            f"DELETE FROM task_state_store WHERE id > %s AND expires_at < %s ORDER BY id LIMIT %s RETURNING id, "
            f"{columns}"
        )
        cutoff = now.replace(tzinfo=None)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            while True:
                cur.execute(statement, (after, cutoff, batch))
                rows = cur.fetchall()
                os.write(out, "".join("\t".join(map(str, row)) + "\n" for row in rows).encode())
                os.fsync(out)
                conn.commit()
                deleted += len(rows)
                if len(rows) < batch:
                    break
                after = max(row[0] for row in rows)
    os.close(out)
    print(deleted)


if __name__ == "__main__":
    main()
