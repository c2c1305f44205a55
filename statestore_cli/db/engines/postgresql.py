"""PostgreSQL: parallel scans of its own, ``timestamptz``, collations that need ``C`` for code point order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, case, func, select
from sqlalchemy.engine import Connection, Engine

from statestore_cli.db.engines.base import EngineImpl, Narrow


class PostgreSQLImpl(EngineImpl):
    # A CASE per row costs PostgreSQL little next to a range count of the index each.
    buckets_in_pass = True

    def code_point_order(self, column: Any) -> Any:
        return column.collate("C")

    def region_order(self, column: Any) -> Any:
        if getattr(column.type, "form", "text") == "native":
            return column  # the uuid type orders as its text does
        return super().region_order(column)

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def splits_pass(self, engine: Engine) -> bool:
        return False  # PostgreSQL spreads a scan over parallel workers itself

    def count_ranges(
        self, conn: Connection, narrow: Narrow, column: Any, ranges: Sequence[tuple[Any, Any]]
    ) -> list[int]:
        # The range's number as a CASE over the bound ends, grouped: one range scan of the whole window.
        number = case(*[(column < high, i) for i, (_low, high) in enumerate(ranges)], else_=len(ranges))
        inner = narrow(select(number.label("n"))).where(column >= ranges[0][0], column < ranges[-1][1]).subquery()
        found = {int(n): int(count) for n, count in conn.execute(select(inner.c.n, func.count()).group_by(inner.c.n))}
        return [int(found.get(i, 0)) for i in range(len(ranges))]


IMPL_CLASS = PostgreSQLImpl
