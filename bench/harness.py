"""What every benchmark script shares: its common options (sizes, --repeat, --engines and the servers,
--workdir, --json-out, --quick), the loop over the engines it measures (each engine's stores opened
before and closed after, a server that does not answer skipped), the turns its repeated commands
take, and how it prints and saves what it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import stores
from generate import Spec
from sqlalchemy.engine import make_url

T = TypeVar("T")


# -- options ------------------------------------------------------------------------------------------------
class _QuickSizes(argparse.Action):
    """``--quick``: the sizes of a smoke test, set as the option is read (an option given after it wins)."""

    def __init__(self, option_strings: list[str], dest: str, sizes: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)
        self.sizes = sizes

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: object) -> None:
        setattr(namespace, self.dest, True)
        for name, value in self.sizes.items():
            setattr(namespace, name, value)


def arguments(
    doc: str | None,
    *,
    repeat: int | None = None,
    rows: int | None = None,
    expired: bool = False,
    small_rows: int | None = None,
    batch_size: int | None = None,
    engines: bool = False,
    workdir: str | None = "statestore-bench",
    json_out: bool = False,
    quick: dict[str, Any] | None = None,
) -> argparse.ArgumentParser:
    """A benchmark's parser, its docstring as the description, with the shared options it asks for:
    ``--rows`` (and ``--expired``, default half), ``--small-rows``, ``--repeat``, ``--batch-size`` with
    these defaults; ``--engines``, ``--pg-url``, ``--mysql-url``; ``--workdir`` (under the temporary
    directory); ``--json-out``; ``--quick`` (``quick``: option name -> value). Read it with ``parse``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if rows is not None:
        p.add_argument("--rows", type=int, default=rows, help=f"task keys in the (large) store ({rows})")
    if expired:
        p.add_argument("--expired", type=int, help="of which expired (default half)")
    if small_rows is not None:
        p.add_argument(
            "--small-rows", type=int, default=small_rows, help=f"task keys in the small store ({small_rows})"
        )
    if repeat is not None:
        p.add_argument("--repeat", type=int, default=repeat, help=f"runs of each command; the median counts ({repeat})")
    if batch_size is not None:
        p.add_argument("--batch-size", type=int, default=batch_size, help=f"the commands' --batch-size ({batch_size})")
    if engines:
        p.add_argument(
            "--engines",
            default="sqlite,postgresql,mariadb",
            help="comma-separated: sqlite, postgresql, mariadb (servers not reachable are skipped)",
        )
        p.add_argument("--pg-url", default=stores.SERVERS["postgresql"], help="PostgreSQL server (a fresh schema)")
        p.add_argument("--mysql-url", default=stores.SERVERS["mariadb"], help="MariaDB server (a fresh database)")
    if workdir is not None:
        default = Path(tempfile.gettempdir()) / workdir
        p.add_argument("--workdir", type=Path, default=default, help=f"stores and scratch files ({default})")
    if json_out:
        p.add_argument("--json-out", type=Path, help="write the results as JSON here")
    if quick is not None:
        shown = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in quick.items())
        p.add_argument("--quick", action=_QuickSizes, sizes=quick, help=f"a smoke test: {shown}")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The options: ``--expired`` half of ``--rows`` unless given, ``--repeat`` at least 1, ``--workdir``
    made (never inside the repository, except under bench/data/)."""
    args = p.parse_args(argv)
    if getattr(args, "expired", 0) is None:
        args.expired = args.rows // 2
    if getattr(args, "repeat", None) is not None:
        args.repeat = max(1, args.repeat)
    if getattr(args, "workdir", None) is not None:
        args.workdir = check_workdir(args.workdir)
    return args


def check_workdir(workdir: Path) -> Path:
    """The work directory, made; never inside the repository, except under bench/data/."""
    workdir = workdir.resolve()
    if workdir.is_relative_to(stores.REPO) and not workdir.is_relative_to(stores.REPO / "bench" / "data"):
        raise SystemExit(f"--workdir {workdir} is inside the repository: use a temporary directory or bench/data/")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


# -- engines ------------------------------------------------------------------------------------------------
def engines(args: argparse.Namespace) -> list[str]:
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    for name in names:
        if name != "sqlite" and name not in stores.SERVERS:
            raise SystemExit(f"unknown engine {name!r}: use sqlite, postgresql or mariadb")
    return names


def server_url(engine: str, args: argparse.Namespace) -> str:
    return args.pg_url if engine == "postgresql" else args.mysql_url


def each_engine(
    args: argparse.Namespace,
    env: dict[str, str],
    measure: Callable[[str, stores.Stores], None],
    *,
    regenerate: bool = False,
    require_servers: bool = False,
) -> dict[str, str]:
    """``measure(engine, stores)`` for every engine of --engines, its stores closed after it (also when it
    fails); an unreachable server is skipped (with ``require_servers``: the run stops). Returns the skipped
    engines and why."""
    skipped: dict[str, str] = {}
    for engine in engines(args):
        if engine == "sqlite":
            store: stores.Stores = stores.SqliteStores(args.workdir, env, regenerate)
        else:
            url = server_url(engine, args)
            problem = stores.reachable(url)
            if problem is not None:
                shown = make_url(url).render_as_string(hide_password=True)
                if require_servers:
                    raise SystemExit(f"{engine} is not reachable at {shown}: {problem}")
                print(f"{engine}: skipped, not reachable ({problem})", file=sys.stderr)
                skipped[engine] = f"not reachable at {shown} ({problem})"
                continue
            store = stores.ServerStores(engine, url, env)
        try:
            measure(engine, store)
        finally:
            store.close()
    return skipped


def large_and_small(engine: str, store: stores.Stores, args: argparse.Namespace) -> Iterator[stores.Original]:
    """The store of --rows keys, then the one of --small-rows, half of each expired."""
    for size in (args.rows, args.small_rows):
        print(f"{engine}: store of {size:,} rows", file=sys.stderr, flush=True)
        yield store.original(Spec(rows=size, expired=size // 2))


# -- turns --------------------------------------------------------------------------------------------------
def in_turn(names: Sequence[T], round_: int) -> list[T]:
    """The order of round ``round_``: each name goes first in turn, so load that drifts during the run
    does not always fall on the same command."""
    at = round_ % len(names) if names else 0
    return [*names[at:], *names[:at]]


def turns(names: Sequence[T], repeat: int) -> Iterator[T]:
    """Every name ``repeat`` times, round by round, each round in its turn (``in_turn``)."""
    for round_ in range(max(1, repeat)):
        yield from in_turn(names, round_)


# -- the report ---------------------------------------------------------------------------------------------
def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> str:
    """Columns padded to their widest cell (those in ``right`` aligned right), a rule under the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def print_skipped(skipped: dict[str, str]) -> None:
    for engine, why in skipped.items():
        print(f"{engine}: skipped ({why})")


def write_json(path: Path, document: Any) -> None:
    """The results as indented JSON, the folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
