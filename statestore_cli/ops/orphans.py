"""Orphans: objects a worker-side backend holds that no database row points to.

They arise because a delete or clear removes the database reference first and then asks the backend
to remove the object: when that second step fails, the object stays with nothing pointing at it. The
next ``set`` of the same key overwrites it (references are deterministic); until then it is listed
here. A write in flight looks like an orphan too (its hook stores the object before the row is
written), so objects younger than the grace window are shown as such and never deleted.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from statestore_cli.backends.base import BaseStoreBackend, StoredRef
from statestore_cli.backends.metastore import MetastoreBackend
from statestore_cli.backends.store import Store
from statestore_cli.errors import (
    EXIT_OK,
    EXIT_OPERATIONAL,
    PARAMETER,
    BackendError,
    ConfigError,
    InvalidInputError,
    first_line,
)

DEFAULT_GRACE = timedelta(hours=1)


class Orphan(NamedTuple):
    ref: str
    modified_at: datetime | None
    age: timedelta | None  # None: the backend cannot say when the object was written
    in_grace: bool  # younger than the grace window (or of unknown age): may be a write in flight
    deleted: bool = False
    error: str | None = None  # why deleting it failed


class OrphanReport(NamedTuple):
    backend: str
    listed: int  # objects the backend holds
    orphans: list[Orphan]
    grace: timedelta
    older_than: timedelta | None  # the age an orphan needs to be deleted (None: nothing is deleted)
    referenced: int = 0  # listed objects a row points to

    @property
    def deleted(self) -> int:
        return sum(o.deleted for o in self.orphans)

    @property
    def failed(self) -> int:
        return sum(o.error is not None for o in self.orphans)

    @property
    def deletable(self) -> int:
        """The orphans a delete would remove: those past the grace window, not yet deleted or tried."""
        return sum(not (o.in_grace or o.deleted or o.error) for o in self.orphans)

    @property
    def exit_code(self) -> int:
        return EXIT_OPERATIONAL if self.failed else EXIT_OK


def find_orphans(
    store: Store,
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
    older_than: timedelta | None = None,
    delete: bool = False,
    all_unreferenced: bool = False,
) -> OrphanReport:
    """The worker backend's unreferenced objects (those at least ``older_than`` old, when given); with
    ``delete``, removes them at once, as ``plan_orphan_delete`` and then ``delete_orphans`` would (the
    caller has decided: nothing asks)."""
    if not delete:
        worker, metastore = _open(store, delete=False)
        return _listing(store, worker, metastore, now, grace, older_than)
    plan = plan_orphan_delete(store, now, grace=grace, older_than=older_than, all_unreferenced=all_unreferenced)
    return delete_orphans(store, plan)


def plan_orphan_delete(
    store: Store,
    now: datetime,
    *,
    grace: timedelta = DEFAULT_GRACE,
    older_than: timedelta | None = None,
    all_unreferenced: bool = False,
) -> OrphanReport:
    """What ``delete_orphans`` would delete, deleting nothing: the orphans at least ``older_than`` old, which
    must be at least ``grace``. Refused when the database references none of the objects the backend holds
    (a wrong database or backend root makes every object look orphaned) unless ``all_unreferenced``."""
    _check_ages(grace, older_than)
    worker, metastore = _open(store, delete=True)
    plan = _listing(store, worker, metastore, now, grace, older_than)
    _refuse_a_store_referencing_none(plan, all_unreferenced)
    return plan


def delete_orphans(store: Store, plan: OrphanReport) -> OrphanReport:
    """Deletes the orphans of ``plan`` (from ``plan_orphan_delete``) past their grace window, and only those:
    an object orphaned since the plan was not asked about. One a row points to again is left alone."""
    worker, metastore = _open(store, delete=True)
    return plan._replace(orphans=_delete(worker, metastore, plan.orphans))


def _check_ages(grace: timedelta, older_than: timedelta | None) -> None:
    if older_than is None:
        raise InvalidInputError(
            f"deleting orphans needs {PARAMETER}, the age an orphan must have (e.g. 7d)", parameter="older_than"
        )
    if older_than < grace:
        raise InvalidInputError(
            f"{PARAMETER} {_days(older_than)} is shorter than the grace window ({_days(grace)}): a younger object "
            "may be a write in flight; give a longer age",
            parameter="older_than",
        )


def _refuse_a_store_referencing_none(plan: OrphanReport, all_unreferenced: bool) -> None:
    # Every object orphaned is what a wrong --conn (another deployment's or an empty database) or a wrong
    # backend root looks like: deleting then would remove every live value of the real store.
    if plan.listed and not plan.referenced and not all_unreferenced:
        objects = f"{plan.listed:,} object{'s' if plan.listed != 1 else ''}"
        raise InvalidInputError(
            f"refusing to delete: the store references none of the {objects} that [workers] state_store_backend "
            f"{plan.backend} holds, so it is probably the wrong --conn or backend root; if every one of them really "
            f"is an orphan, pass {PARAMETER}",
            parameter="all_unreferenced",
        )


def _open(store: Store, delete: bool) -> tuple[BaseStoreBackend, MetastoreBackend]:
    settings = store.settings
    worker = store.worker_backend
    if worker is None:
        raise ConfigError(
            "`orphans` looks for a worker-side backend's objects, and [workers] state_store_backend is not set"
        )
    if not type(worker).can_list_refs():
        raise BackendError(f"{settings.worker_backend} cannot list what it stores: it does not implement list_refs()")
    if delete and type(worker).delete_ref is BaseStoreBackend.delete_ref:
        raise BackendError(f"{settings.worker_backend} cannot delete by reference: it does not implement delete_ref()")
    metastore = store.backend  # only read: what is deleted is the worker backend's
    if not isinstance(metastore, MetastoreBackend):
        raise BackendError(
            f"`orphans` reads the references from the metastore; [state_store] backend is {settings.backend}"
        )
    return worker, metastore


def _listing(
    store: Store,
    worker: BaseStoreBackend,
    metastore: MetastoreBackend,
    now: datetime,
    grace: timedelta,
    older_than: timedelta | None,
) -> OrphanReport:
    settings = store.settings
    listed = _list_refs(settings.worker_backend, worker)  # objects first, rows second: a write in between is referenced
    referenced = metastore.references()
    orphans = [_orphan(item, now, grace) for item in listed if item.ref not in referenced]
    if older_than is not None:
        orphans = [o for o in orphans if o.age is not None and o.age >= older_than]
    pointed_to = sum(item.ref in referenced for item in listed)
    return OrphanReport(settings.worker_backend, len(listed), orphans, grace, older_than, pointed_to)


def _list_refs(name: str | None, worker: BaseStoreBackend) -> list[StoredRef]:
    try:
        return [StoredRef(*item) for item in worker.list_refs()]
    except Exception as exc:  # user code: any failure is the backend's
        raise BackendError(f"{name}.list_refs() failed: {type(exc).__name__}: {first_line(exc)}") from None


def _orphan(item: StoredRef, now: datetime, grace: timedelta) -> Orphan:
    age = None if item.modified_at is None else max(now - item.modified_at, timedelta(0))
    return Orphan(item.ref, item.modified_at, age, in_grace=age is None or age < grace)


def _delete(worker: BaseStoreBackend, metastore: MetastoreBackend, orphans: list[Orphan]) -> list[Orphan]:
    # Read the references again just before deleting: a set of the same key since the first read
    # has made its object live again.
    referenced = metastore.references()
    done = []
    for orphan in orphans:
        if orphan.ref in referenced:
            continue  # no orphan any more
        if orphan.in_grace:
            done.append(orphan)
            continue
        try:
            worker.delete_ref(orphan.ref)
        except Exception as exc:  # user code: any failure is the backend's
            done.append(orphan._replace(error=f"{type(exc).__name__}: {first_line(exc)}"))
            continue
        done.append(orphan._replace(deleted=True))
    return done


def _days(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
