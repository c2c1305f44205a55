"""Prometheus metrics files as the tests read them: strictly checked against the text exposition format."""

from __future__ import annotations

import re
from pathlib import Path

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SAMPLE_VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|NaN|Inf)")


_LABELS = re.compile(
    r'\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*",)*[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*")\}'
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"')


def _unescape(match: re.Match[str]) -> str:
    return "\n" if match.group(1) == "n" else match.group(1)


Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def read_samples(path: Path) -> dict[str, dict[Labels, float]]:
    """The metrics file ``path`` as {family name: {its samples' labels: value}}, in the file's order, after
    checking it strictly against the text exposition format: every family a ``# HELP`` line, then its
    ``# TYPE`` line, then its samples (each with distinct labels, every one with a ``database`` label),
    no blank or stray lines, a newline at the end; and that prometheus_client's parser reads the same
    families, labels and values from it."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "the last line must end with a newline"
    families: dict[str, dict[str, object]] = {}
    samples: dict[str, dict[Labels, float]] = {}
    current = None
    for number, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            assert _METRIC_NAME.fullmatch(name) and name not in families and help_text.strip(), where
            assert "\\" not in help_text, where  # no escapes needed: none used
            families[name] = {}
            samples[name] = {}
            current = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            assert name == current and "type" not in families[name], where
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), where
            families[name]["type"] = kind
        else:
            head, _, value = line.rpartition(" ")
            name, brace, rest = head.partition("{")
            assert name == current and "type" in families[name], where
            labels: Labels = ()
            if brace:
                match = _LABELS.fullmatch(brace + rest)
                assert match, where
                pairs = _LABEL.findall(match.group(1))
                names = [label for label, _ in pairs]
                assert len(set(names)) == len(names), where
                unescaped = [(k, re.sub(r"\\(.)", _unescape, v)) for k, v in pairs]
                labels = tuple(sorted(unescaped))
            assert "database" in dict(labels) and dict(labels)["database"], f"{where}: no database label"
            assert labels not in samples[name], f"{where}: a second sample with these labels"
            assert _SAMPLE_VALUE.fullmatch(value), where
            samples[name][labels] = float(value)
    assert all("type" in family for family in families.values())

    from prometheus_client.parser import text_string_to_metric_families

    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    assert set(parsed) == set(samples)
    for name, family in parsed.items():
        assert family.type == families[name]["type"]
        read = {tuple(sorted(sample.labels.items())): sample.value for sample in family.samples}
        assert read == samples[name]
    return samples


def read_metrics(path: Path, labels: dict[str, str] | None = None) -> dict[str, float | None]:
    """The metrics file ``path`` (checked as ``read_samples`` does) as {family name: its one sample, or
    None when it has none}; every sample has exactly ``labels``, by default a ``database`` label only."""
    values: dict[str, float | None] = {}
    for name, found in read_samples(path).items():
        assert len(found) <= 1, f"{name} has {len(found)} samples"
        for sample_labels in found:
            if labels is None:
                assert [label for label, _ in sample_labels] == ["database"], (name, sample_labels)
            else:
                assert dict(sample_labels) == labels, (name, sample_labels)
        values[name] = next(iter(found.values()), None)
    return values
