"""What ``list`` and ``stats`` read: the keys a filter selects, their figures, and the near misses of a
filter that selected nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from statestore_cli.backends.store import is_metastore
from statestore_cli.model.entries import Entry, KeyFilter
from statestore_cli.model.retention import utcnow

if TYPE_CHECKING:  # each imported where it is used: only `stats` needs them, and they cost start-up
    from statestore_cli.backends.store import Store
    from statestore_cli.ops.metrics import StatsMetrics
    from statestore_cli.ops.stats import StoreStats


def list_entries(store: Store, filt: KeyFilter, *, limit: int | None = None, offset: int = 0) -> Iterator[Entry]:
    """The keys ``filt`` selects, ordered by scope and key (task keys by dag, run, task, map index and key,
    then asset keys); ``offset`` skips that many and ``limit`` stops after that many, in the database."""
    backend = store.listing_backend("`list`")
    return backend.entries(filt, limit=limit, offset=offset)


def near_misses(store: Store, filt: KeyFilter) -> list[str]:
    """For a ``list`` or ``stats`` that found nothing: for each of ``filt``'s dag id, task id and asset name
    that no key (no asset) has, the closest existing one, as "no dag_id 'etl_order_daily' has keys; did you
    mean 'etl_orders_daily'?". Reads the distinct ids, so call it only when the result is empty."""
    if store.api_mode:
        return list(store.api_backend().unknown)
    backend = store.backend
    if not is_metastore(backend):
        return []
    import difflib

    notes = []
    asks = (("dag_id", filt.dag_id, None), ("task_id", filt.task_id, filt.dag_id), ("name", filt.name, None))
    for field, given, within in asks:
        if given is None:
            continue
        known = backend.known_ids(field, within)
        if given in known:
            continue
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        if not close:
            continue
        if field == "name":
            notes.append(f"no asset is named {given!r}; did you mean {close[0]!r}?")
        else:
            of = f" of dag_id {within!r}" if within is not None and field != "dag_id" else ""
            notes.append(f"no {field} {given!r}{of} has keys; did you mean {close[0]!r}?")
    return notes


def stats(store: Store, filt: KeyFilter, now: datetime | None = None, largest: int | None = None) -> StoreStats:
    """Figures of the keys ``filt`` selects (``statestore_cli.ops.stats``), as of ``now`` (default: this moment),
    and with ``largest=N`` their N largest values (``statestore_cli.ops.largest``)."""
    backend = store.metastore_backend("`stats`")
    from statestore_cli.ops.stats import store_stats

    return store_stats(
        backend.engine,
        filt,
        now or utcnow(),
        max_value_storage_bytes=store.settings.max_value_storage_bytes,
        largest=largest,
    )


def stats_metrics(store: Store, figures: StoreStats, labels: Mapping[str, str]) -> StatsMetrics:
    """The gauges ``stats --metrics-file`` writes for ``figures``: those, and the age of the oldest expired
    task key the same filter selects (0 when none has expired)."""
    from statestore_cli.ops.metrics import StatsMetrics
    from statestore_cli.ops.stats import oldest_expired_at

    age: float | None = None
    if figures.task is not None:
        backend = store.backend
        assert is_metastore(backend)  # stats() has checked it
        oldest = oldest_expired_at(backend.engine, figures.filter, figures.now)
        age = 0 if oldest is None else max(0.0, (figures.now - oldest).total_seconds())
    return StatsMetrics.of(figures, age, labels)
