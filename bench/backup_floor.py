"""The floor of ``clean --backup``: the least a backed-up clean must do, in a bare driver script.

    python bench/backup_floor.py ENGINE TARGET BATCH FILE      # TARGET: the SQLite file, or '-' and $BENCH_DB

Deletes the expired task keys in batches of BATCH rows, each in a transaction of its own that gets the deleted
rows' columns back (``DELETE ... RETURNING``; on PostgreSQL ``COPY (DELETE ... RETURNING ...) TO STDOUT``, the
text straight from the server), appends them to FILE as the driver gives them, fsyncs FILE and only then commits:
the data a backup must move and sync, without putting it in the export format. BATCH 0 is one statement in one
transaction, as ``clean --batch-size 0``: its rows streamed to FILE, one fsync before the commit (on PostgreSQL,
as the clean does, the ``DELETE`` alone while a second connection sends the same rows on its snapshot). Prints
the rows deleted.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

COLUMNS = "dag_id, run_id, task_id, map_index, {key}, updated_at, expires_at, value"  # {key}: quoted per engine


def main() -> None:
    engine, target, batch, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    columns = COLUMNS.format(key="`key`" if engine in ("mysql", "mariadb") else '"key"')
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    now = datetime.now(UTC)
    if engine == "sqlite":
        deleted = sqlite_floor(target, columns, batch, now, out)
    elif engine == "postgresql":
        deleted = postgresql_floor(columns, batch, now, out)
    else:
        deleted = mariadb_floor(columns, batch, now, out)
    os.close(out)
    print(deleted)


def write(out: int, rows: Sequence[Sequence[object]]) -> None:
    os.write(out, "".join("\t".join(map(str, row)) + "\n" for row in rows).encode())


def sqlite_floor(target: str, columns: str, batch: int, now: datetime, out: int) -> int:
    con = sqlite3.connect(target, isolation_level=None)
    cutoff = now.strftime("%Y-%m-%d %H:%M:%S.%f")
    if not batch:  # one statement: the rows fetched a thousand at a time, one fsync, one commit
        con.execute("BEGIN")
        cursor = con.execute(f"DELETE FROM task_state_store WHERE expires_at < ? RETURNING id, {columns}", (cutoff,))
        deleted = 0
        while rows := cursor.fetchmany(1000):
            write(out, rows)
            deleted += len(rows)
        os.fsync(out)
        con.execute("COMMIT")
        return deleted
    statement = (
        f"DELETE FROM task_state_store WHERE id IN (SELECT id FROM task_state_store WHERE id > ? AND "
        f"expires_at < ? ORDER BY id LIMIT ?) RETURNING id, {columns}"
    )
    deleted, after = 0, 0
    while True:
        con.execute("BEGIN")
        rows = con.execute(statement, (after, cutoff, batch)).fetchall()
        write(out, rows)
        os.fsync(out)
        con.execute("COMMIT")
        deleted += len(rows)
        if len(rows) < batch:
            return deleted
        after = max(row[0] for row in rows)


def postgresql_floor(columns: str, batch: int, now: datetime, out: int) -> int:
    """Each batch one ``COPY`` of a ``DELETE`` of the rows its subquery takes locked (as the clean without a
    backup takes them), the text written as it comes, 256 KB at a time; BATCH 0: ``postgresql_paired_floor``."""
    import psycopg

    conn = psycopg.connect(**json.loads(os.environ["BENCH_DB"]))
    if not batch:
        return postgresql_paired_floor(conn, columns, now, out)
    where = (
        "id = ANY(ARRAY(SELECT id FROM task_state_store WHERE id > %s AND expires_at < %s ORDER BY id LIMIT %s "
        "FOR UPDATE SKIP LOCKED)) AND expires_at < %s"
    )
    statement = f"COPY (DELETE FROM task_state_store WHERE {where} RETURNING {columns}, id) TO STDOUT"
    deleted, after = 0, 0
    while True:
        params = [after, now, batch, now]
        count, last = 0, b""
        blocks: list[bytes] = []
        with conn.cursor().copy(statement, params) as copy:
            for block in copy:
                blocks.append(block)
                count += 1
                if len(blocks) >= 1000:
                    os.write(out, b"".join(blocks))
                    last = blocks[-1]
                    blocks.clear()
        if blocks:
            os.write(out, b"".join(blocks))
            last = blocks[-1]
        if count:
            os.fsync(out)
        conn.commit()
        deleted += count
        if count < batch:
            return deleted
        after = int(bytes(last).rsplit(b"\t", 1)[1])  # the rows come in id order (an index scan of the array)


def postgresql_paired_floor(conn: Any, columns: str, now: datetime, out: int) -> int:
    """One statement as ``clean --batch-size 0 --backup`` runs it: the ``DELETE`` alone in a REPEATABLE READ
    transaction while a second connection sends the same rows on its snapshot (``COPY (SELECT ...)``, written as
    they come), the counts compared, one fsync, one commit."""
    import psycopg
    import psycopg.sql

    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
    reader = psycopg.connect(**json.loads(os.environ["BENCH_DB"]))
    reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    reader.execute(psycopg.sql.SQL("SET TRANSACTION SNAPSHOT {}").format(psycopg.sql.Literal(snapshot)))
    read = 0

    def copy_rows() -> None:
        nonlocal read
        blocks: list[bytes] = []
        statement = f"COPY (SELECT {columns} FROM task_state_store WHERE expires_at < %s) TO STDOUT"
        with reader.cursor().copy(statement, [now]) as copy:
            for block in copy:
                blocks.append(block)
                read += 1
                if len(blocks) >= 1000:
                    os.write(out, b"".join(blocks))
                    blocks.clear()
        os.write(out, b"".join(blocks))

    thread = threading.Thread(target=copy_rows)
    thread.start()
    deleted = conn.execute("DELETE FROM task_state_store WHERE expires_at < %s", [now]).rowcount
    thread.join()
    if deleted != read:
        raise SystemExit(f"deleted {deleted} rows but read {read}")
    os.fsync(out)
    conn.commit()
    reader.rollback()
    return deleted


def mariadb_floor(columns: str, batch: int, now: datetime, out: int) -> int:
    import pymysql
    import pymysql.cursors

    conn = pymysql.connect(**json.loads(os.environ["BENCH_DB"]))
    cutoff = now.replace(tzinfo=None)
    if not batch:  # one statement, its rows streamed (an unbuffered cursor), one fsync, one commit
        deleted = 0
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(f"DELETE FROM task_state_store WHERE expires_at < %s RETURNING id, {columns}", (cutoff,))
            while rows := cur.fetchmany(1000):
                write(out, rows)
                deleted += len(rows)
        os.fsync(out)
        conn.commit()
        return deleted
    statement = (
        f"DELETE FROM task_state_store WHERE id > %s AND expires_at < %s ORDER BY id LIMIT %s RETURNING id, {columns}"
    )
    deleted, after = 0, 0
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        while True:
            cur.execute(statement, (after, cutoff, batch))
            rows = cur.fetchall()
            write(out, rows)
            os.fsync(out)
            conn.commit()
            deleted += len(rows)
            if len(rows) < batch:
                return deleted
            after = max(row[0] for row in rows)


if __name__ == "__main__":
    main()
