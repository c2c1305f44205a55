"""``statestore backend check``: exercise the configured custom backends the way Airflow uses them,
checking what a backend author can get wrong.

Checks write and remove keys of the dag ``statestore_backend_check`` and the asset of that name, in
the configured stores themselves, and clear them again at the end.

For a ``[state_store] backend`` (values through ``get``/``set``): it loads; round trips; delete;
clear with and without all map indices; the async methods; JSON null refused. For a ``[workers]
state_store_backend`` (values through the serialize hooks): the same, plus deterministic and
distinct references, and the delete and clear checks look for the object behind the reference.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

from statestore_cli.backends.base import BaseStoreBackend
from statestore_cli.backends.loader import load_backend_class
from statestore_cli.backends.store import Store
from statestore_cli.config import Setting, Settings
from statestore_cli.errors import EXIT_OK, EXIT_OPERATIONAL, ConfigError, StateStoreError
from statestore_cli.ops.backend_probes import CheckFailed, StoreProbe, WorkerProbe, call

STORE, WORKER = "[state_store] backend", "[workers] state_store_backend"


class CheckResult(NamedTuple):
    role: str  # STORE or WORKER
    backend: str  # the dotted path
    check: str
    status: str  # pass, fail, or skip (not run: the class did not load)
    detail: str


class CheckReport(NamedTuple):
    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(r.status == "pass" for r in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.passed else EXIT_OPERATIONAL


def check_backends(store: Store) -> CheckReport:
    """Load and exercise each custom backend ``store``'s settings name (each loaded here, as a check, not
    through the store)."""
    settings = store.settings
    targets = []
    if not settings.uses_builtin_backend:
        targets.append((STORE, "state_store", "backend"))
    if settings.worker_backend:
        targets.append((WORKER, "workers", "state_store_backend"))
    if not targets:
        raise ConfigError(
            "nothing to check: [state_store] backend is the built-in metastore and [workers] state_store_backend "
            "is not set"
        )
    results: list[CheckResult] = []
    for role, section, option in targets:
        setting = settings.setting(section, option)
        results += _check_one(settings, role, setting)
    return CheckReport(results)


def _load(settings: Settings, setting: Setting) -> BaseStoreBackend:
    try:
        cls = load_backend_class(setting, config_file=settings.config_file)
    except StateStoreError as exc:
        raise CheckFailed(str(exc)) from None
    wrapped = getattr(cls, "airflow_class", cls)  # an Airflow backend: its own class is the one to check
    if inspect.isabstract(wrapped):
        missing = ", ".join(sorted(getattr(wrapped, "__abstractmethods__", ())))
        raise CheckFailed(f"{cls.__qualname__} does not implement the abstract methods {missing}")
    return call(f"{cls.__qualname__}.from_settings()", cls.from_settings, settings)


def _check_one(settings: Settings, role: str, setting: Setting) -> list[CheckResult]:
    path = str(setting.value)
    try:
        backend = _load(settings, setting)
    except CheckFailed as failed:
        rows = [CheckResult(role, path, "loads", "fail", str(failed))]
        names = WorkerProbe.CHECKS if role == WORKER else StoreProbe.CHECKS
        return rows + [CheckResult(role, path, name, "skip", "not run: the class did not load") for name, _ in names]
    probe = WorkerProbe(backend) if role == WORKER else StoreProbe(backend)
    loaded = f"{type(backend).__qualname__}, a complete BaseStoreBackend"
    if hasattr(backend, "airflow_class"):
        loaded = f"{type(backend).__qualname__}, a complete Airflow BaseStoreBackend (through statestore's adapter)"
    rows = [CheckResult(role, path, "loads", "pass", loaded)]
    try:
        for name, what in probe.CHECKS:
            try:
                detail = getattr(probe, name)()
            except CheckFailed as failed:
                rows.append(CheckResult(role, path, name, "fail", str(failed)))
            else:
                rows.append(CheckResult(role, path, name, "pass", detail or what))
    finally:
        probe.tidy()
    return rows
