"""What a command knows of the root options: ``CliState`` (set by the root callback, read through the
click context), the settings they resolve, loaded once per run and on first use, and the store the
command works on (``store_of``), opened once and closed when the command ends."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from statestore_cli.cli.failure import FLAGS, warn
from statestore_cli.config import Settings, load_settings
from statestore_cli.errors import StateStoreError

if TYPE_CHECKING:  # imported when a command opens the store: `--help` need not load SQLAlchemy
    from statestore_cli.backends.store import Store


@dataclass
class CliState:
    config_path: Optional[Path] = None
    conn: Optional[str] = None
    debug: bool = False
    connect_timeout: Optional[str] = None
    lock_timeout: Optional[str] = None  # a writing command's --lock-timeout (``options.LockTimeoutOpt``)
    api_url: Optional[str] = None  # --api-url (or $STATESTORE_API_URL)
    _settings: Optional[Settings] = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(
                self.config_path,
                self.conn,
                connect_timeout_override=self.connect_timeout,
                lock_timeout_override=self.lock_timeout,
                api_url_override=self.api_url,
            )
            for note in self._settings.warnings:  # a typo in an option name must not pass unnoticed
                warn(note.worded(FLAGS))
        return self._settings


def settings_of(ctx: typer.Context) -> Settings:
    """The settings of this run: the configuration as the root options (and --lock-timeout) change it."""
    state: CliState = ctx.find_root().obj
    return state.settings


def store_of(ctx: typer.Context, *, writes: bool = True, create_file: bool = False) -> "Store":
    """The store of this command, on the settings of this run (``settings_of``), closed when the command
    ends; the first call opens it, later ones return it. ``writes``, ``create_file``: see ``Store``."""
    from statestore_cli.backends.store import Store

    found = ctx.meta.get(_STORE)
    if isinstance(found, Store):
        return found
    command = f"`statestore {ctx.command_path.partition(' ')[2]}`"
    store = ctx.with_resource(Store.open(settings_of(ctx), writes=writes, create_file=create_file, command=command))
    ctx.meta[_STORE] = store
    return store


_STORE = "statestore.store"  # the key of the command's store in the click context's meta


def take_lock_timeout(ctx: typer.Context, value: Optional[str]) -> Optional[str]:
    """Hand a writing command's --lock-timeout to the settings as it is parsed: however the command
    reaches them, they are read with it (and check it, exit 2 when it is no duration)."""
    state = ctx.find_root().obj
    if value is not None and isinstance(state, CliState):  # not set while the shell completes a word
        state.lock_timeout = value
    return value


def metrics_labels(ctx: typer.Context, given: Optional[list[str]]) -> dict[str, str]:
    """The labels of a metrics file: the pairs ``given`` (checked first: a bad one writes nothing), and
    the ``database`` the configured URL names (through the REST API, the API's) unless one of them does. A
    configuration that cannot be read names no database (``unknown``); the run fails on it and records that."""
    from statestore_cli.backends.api_client import api_label
    from statestore_cli.ops.metrics import DATABASE, database_label, metric_labels

    labels = metric_labels(given or [], "unknown")
    if any(pair.partition("=")[0] == DATABASE for pair in given or []):
        return labels
    try:
        settings = settings_of(ctx)
        database = api_label(settings.api_url) if settings.api_url else database_label(settings.sql_alchemy_conn)
    except StateStoreError:
        database = "unknown"
    return {**labels, DATABASE: database}
