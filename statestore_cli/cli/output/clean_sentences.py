"""The sentences a clean and its dry run count keys in: expired keys (task and dag-run keys apart) and the
keys kept for unfinished task instances. Apart from the dry run's table (``dry_run``), so that a clean that
prints only a sentence does not load the table layer."""

from __future__ import annotations

from statestore_cli.cli.output.safe_text import safe_text


def plural(count: int, word: str) -> str:
    """``1 row``, ``1,000 rows``."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def expired_keys(total: int, dag_run: int = 0) -> str:
    """The count people read: 12 expired task keys; where ``dag_run`` of them are dag-run keys (Airflow 3.4),
    12 expired keys (10 task keys, 2 dag-run keys)."""
    if not dag_run:
        return plural(total, "expired task key")
    split = f"{plural(total - dag_run, 'task key')}, {plural(dag_run, 'dag-run key')}"
    return f"{plural(total, 'expired key')} ({split})"


def spared_sentence(spared: dict[str, int] | None, *, dry_run: bool) -> str | None:
    """What a clean keeps for unfinished task instances, by their state; None where it spared nothing."""
    total = sum((spared or {}).values())
    if not spared or not total:
        return None
    from statestore_cli.ops.cleanup import by_count

    states = ", ".join(f"{n:,} {safe_text(state)}" for state, n in by_count(spared).items())
    kept = "Would keep" if dry_run else "Kept"
    return (
        f"{kept} {plural(total, 'expired task key')} of unfinished task instances ({states}): a retry may "
        "need them; --include-unfinished deletes them too."
    )
