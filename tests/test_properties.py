"""Property-based tests (hypothesis): the duration parser, the config reader and the JSON value round trip
take any input to the right value or the documented error, never another exception; and a bounded,
seeded fuzz of the CLI over random argument lists finds no traceback.

Every test is derandomised (the same examples every run) and small enough for the suite.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from cli_running import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore_cli import AssetScope, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.config import load_option_specs, load_settings
from statestore_cli.errors import ConfigError, InvalidInputError
from statestore_cli.model.retention import NEVER_EXPIRE, parse_duration, parse_retention
from statestore_cli.ops.commands import db_init, get_entry, set_value

pytestmark = pytest.mark.slow  # hundreds of generated examples per test

SETTINGS = settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


# -- durations ----------------------------------------------------------------------------------------------
@SETTINGS
@given(st.text(max_size=30))
def test_any_text_is_a_duration_or_an_invalid_input_error(text):
    try:
        parsed = parse_duration(text, "timeout")
    except InvalidInputError as exc:
        assert str(exc).startswith(("invalid timeout ", "timeout ")), exc
        return
    assert isinstance(parsed, timedelta) and parsed >= timedelta(0)


@SETTINGS
@given(st.dictionaries(st.sampled_from("wdhms"), st.integers(0, 10_000), min_size=1))
def test_compact_durations_mean_what_they_say(parts):
    text = "".join(f"{parts[u]}{u}" for u in "wdhms" if u in parts)  # units in their fixed order
    expected = sum(UNITS[u] * n for u, n in parts.items())
    assert parse_duration(text, "timeout").total_seconds() == expected
    assert parse_duration(text.upper(), "timeout").total_seconds() == expected  # 1H as 1h


@SETTINGS
@given(
    st.integers(0, 999),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 10_000),
)
def test_iso_durations_mean_what_they_say(days, hours, minutes, seconds):
    text = f"P{days}DT{hours}H{minutes}M{seconds}S"
    assert parse_duration(text, "timeout") == timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


@SETTINGS
@given(st.text(max_size=20))
def test_any_text_is_a_retention_or_an_invalid_input_error(text):
    try:
        parsed = parse_retention(text)
    except InvalidInputError:
        return
    assert parsed is NEVER_EXPIRE or (isinstance(parsed, timedelta) and parsed > timedelta(0))


# -- the config reader ---------------------------------------------------------------------------------------
ALL_OPTIONS = load_option_specs()
LINE = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=40)


def check_types(loaded) -> None:
    """Every value has its option's type, in range."""
    for setting in loaded:
        kind, value = setting.spec.type, setting.value
        if kind == "int":
            assert isinstance(value, int) and 0 <= value <= 2_147_483_647
        elif kind == "bool":
            assert isinstance(value, bool)
        else:  # durations and timeouts are kept as written; the typed properties read them
            assert isinstance(value, str)
    assert loaded.connect_timeout > 0
    assert loaded.state_cleanup_older_than.total_seconds() >= 0


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(ALL_OPTIONS), LINE), max_size=4))
def test_any_option_value_from_the_environment_is_read_or_a_config_error(values):
    environ = {"AIRFLOW_HOME": "/nonexistent-home"}
    environ.update({spec.env_var: raw for spec, raw in values})
    try:
        loaded = load_settings(environ=environ)
    except ConfigError as exc:
        assert "invalid value" in str(exc) and "\n" not in str(exc)
        return
    check_types(loaded)


@SETTINGS
@given(
    st.lists(st.one_of(LINE, st.sampled_from(["[state_store]", "[workers]", "[database]", "a = 1", "x"])), max_size=8)
)
def test_any_config_file_is_read_or_a_config_error(tmp_path_factory, lines):
    cfg = tmp_path_factory.mktemp("cfg") / "airflow.cfg"
    cfg.write_text("\n".join(lines), encoding="utf-8")
    try:
        loaded = load_settings(config_path=cfg, environ={"AIRFLOW_HOME": "/nonexistent-home"})
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    check_types(loaded)
    assert all("\n" not in str(note) for note in loaded.warnings)


@SETTINGS
@given(st.data(), st.sampled_from([s for s in ALL_OPTIONS if s.type == "int"]))
def test_every_integer_in_range_is_read_back(data, spec):
    number = data.draw(st.integers(spec.min or 0, spec.max))  # the option's own range
    environ = {"AIRFLOW_HOME": "/nonexistent-home", spec.env_var: f" {number} "}
    assert load_settings(environ=environ).setting(spec.section, spec.option).value == number


# -- JSON values ---------------------------------------------------------------------------------------------
JSON_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(st.one_of(inner, st.none()), max_size=4),
        st.dictionaries(st.text(max_size=10), st.one_of(inner, st.none()), max_size=4),
    ),
    max_leaves=12,
)
KEYS = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=40
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('props') / 'store.db'}"
    settings_ = load_settings(conn_override=url, environ={"AIRFLOW_HOME": "/nonexistent-home"})
    with Store.open(settings_, create_file=True) as made:
        db_init(made)
    with Store.open(settings_) as opened:  # one store for every generated example
        yield opened


def same(a, b) -> bool:
    """Equal as JSON: 1 and 1.0 are the same number only if both are floats; -0.0 == 0.0 is fine."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and (a == b or math.isclose(a, b))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(SETTINGS, max_examples=150)
@given(value=JSON, key=KEYS, task=st.booleans())
def test_any_json_value_comes_back_as_it_was_written(store, value, key, task):
    scope = TaskScope("d", "r", "t") if task else AssetScope(name="a")
    set_value(store, scope, key, value)
    assert same(get_entry(store, scope, key).value, value)


# -- a bounded fuzz of the CLI --------------------------------------------------------------------------------
WORDS = [
    "get",
    "set",
    "delete",
    "clear",
    "list",
    "stats",
    "clean",
    "db",
    "init",
    "check",
    "config",
    "show",
    "--dag-id",
    "--run-id",
    "--task-id",
    "--map-index",
    "--asset-name",
    "--asset-uri",
    "--asset-id",
    "--retention",
    "--string",
    "--yes",
    "--all-map-indices",
    "--key",
    "--store",
    "--limit",
    "--offset",
    "--largest",
    "--dry-run",
    "--batch-size",
    "--all",
    "--lock-timeout",
    "--statement-timeout",
    "--max-runtime",
    "--exclusive",
    "--backend-cleanup",
    "--delete",
    "--fail-on-skip",
    "--file",
    "--grace",
    "--raw",
    "--keep-expiry",
    "--expires-at",
    "--force",
    "copy",
    "--to-dag-id",
    "--to-run-id",
    "--to-task-id",
    "--to-map-index",
    "--to-asset-name",
    "--to-asset-uri",
    "--to-asset-id",
    "--move",
    "--overwrite",
    "assets",
    "runs",
    "sweep",
    "2026-11-30T00:00:00+00:00",
    "2026-11-30T00:00:00",
    "backend",
    "export",
    "import",
    "diff",
    "orphans",
    "--all-unreferenced",
    "--older-than",
    "--include-unfinished",
    "--metrics-file",
    "--metrics-label",
    "--backup",
    "region=eu",
    "--header",
    "-o",
    "--output",
    "--connect-timeout",
    "--api-url",
    "--config",
    "--debug",
    "--help",
    "json",
    "plain",
    "table",
    "task",
    "asset",
    "never",
    "1d",
    "0s",
    "-1",
    "0",
    "7",
    "x",
    "",
    "{",
    "null",
    '{"a": 1}',
    "k",
    "d",
    "r",
    "t",
    "=",
    "--",
    "-",
    "P1D",
    "99999999999999999999",
    "\udcff",
    "\x1b[31m",
]
COMMANDS = [
    ["get"],
    ["set"],
    ["delete"],
    ["clear"],
    ["list"],
    ["stats"],
    ["clean"],
    ["db", "check"],
    ["config", "show"],
    ["export"],
    ["import"],
    ["diff"],
    ["assets", "sweep"],
    ["assets", "delete"],
    ["runs", "delete"],
    ["copy"],
]
SCOPES = [[], ["--dag-id", "d", "--run-id", "r", "--task-id", "t"], ["--asset-name", "a"]]
# Mostly a real command and scope with random words after them, so the fuzz gets past the parser.
ARGS = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=8),
    st.tuples(st.sampled_from(COMMANDS), st.sampled_from(SCOPES), st.lists(st.sampled_from(WORDS), max_size=6)).map(
        lambda parts: [*parts[0], *parts[1], *parts[2]]
    ),
)


@settings(SETTINGS, max_examples=300)
@given(args=ARGS)
def test_random_command_lines_never_show_a_traceback(fuzz_store, fuzz_cwd, args):
    if "--debug" in args:  # asks for the traceback on purpose
        args = [a for a in args if a != "--debug"]
    result = run_cli(*args, conn=fuzz_store, input="")
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, (args, result.output)
    assert not result.stderr.startswith("statestore: error: unexpected "), (args, result.output)  # a bug of ours
    assert result.exit_code in (0, 1, 2, 3), (args, result.output)
    if result.exit_code != 0 and "--help" not in args:
        assert result.stderr.startswith("statestore: "), (args, result.output)


@pytest.fixture
def fuzz_cwd(tmp_path, monkeypatch) -> None:
    """Files the fuzz names (--metrics-file k) land in a folder of the test's own."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'store.db'}"
    db_init(
        Store.open(load_settings(conn_override=url, environ={"AIRFLOW_HOME": "/nonexistent-home"}), create_file=True)
    )
    return url


def test_the_fuzz_vocabulary_names_every_command_and_option():
    """A new command or option joins the fuzz: every one of them is in WORDS."""
    from typer.main import get_command

    from statestore_cli.cli.root_command import app

    root = get_command(app)
    names: set[str] = set()

    def walk(command) -> None:
        names.update(opt for p in command.params for opt in p.opts if opt.startswith("-"))
        for name, sub in getattr(command, "commands", {}).items():
            names.add(name)
            walk(sub)

    walk(root)
    ignored = {"-h", "--version", "--install-completion", "--show-completion", "--conn", "-y"}
    assert names - ignored - set(WORDS) == set()
