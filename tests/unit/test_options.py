"""Options are declared once (options.py): pytest's option and ini registration, the
Settings object and the docs' options page (docs/options.md) all come from that list."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from pytest_socialbias.options import HELP_GROUPS, OPTIONS, Settings, Where, read_settings

OPTIONS_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text(encoding="utf-8")


def test_every_option_sets_one_settings_field():
    fields = {f.name for f in dataclasses.fields(Settings)} - {"root"}
    assert sorted(o.field for o in OPTIONS) == sorted(fields)
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)


def test_each_default_is_declared_once_in_the_option_table():
    """Settings' defaults are the option table's (options._default), so the two cannot
    drift: a field whose option declares no default has none of its own either (None, or
    False for a flag left off)."""
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    here = Where(root=Path("."), invocation=Path("."))
    declared = {o.field: o.convert(o.default, here) for o in OPTIONS if o.default is not None}
    assert declared == {"concurrency": 16, "record": "new", "cache_dir": Path(".socialbias"),
                        "guard_policy": "follow", "simulator_check": "rules", "gates_for": "all"}
    for option in OPTIONS:
        if option.default is not None:
            assert fields[option.field] == declared[option.field], option.flag
        else:
            assert fields[option.field] in (None, False), f"{option.field}: a default outside the option table"


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.default is not None], ids=lambda o: o.flag)
def test_the_help_of_an_option_with_a_default_names_it(option):
    assert re.search(r"(?<![\w.])" + re.escape(option.default) + r"(?!\w)", option.help), option.help


def test_a_run_given_no_option_reads_the_same_settings_as_settings_defaults(pytester):
    """What pytest registers as an ini default and what Settings() holds agree, option
    by option (paths resolved under the rootdir as the run resolves them)."""
    read = []

    class Reader:
        def pytest_configure(self, config):
            read.append(read_settings(config))

    pytester.makeini("[pytest]\n")
    pytester.runpytest_inprocess("--co", "-q", plugins=[Reader()])
    settings = read[0]
    for option in OPTIONS:
        given, default = getattr(settings, option.field), getattr(Settings(), option.field)
        if option.field == "cache_dir":
            default = settings.root / default
        assert given == default, option.flag


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.flag)
def test_the_options_page_lists_the_option_with_its_ini_name(option):
    shown = option.flag if option.kind == "flag" else f"{option.flag}={option.metavar}"
    row = next((line for line in OPTIONS_PAGE.splitlines() if line.startswith(f"| `{shown}`")), None)
    assert row is not None, f"docs/options.md lacks {option.flag}: run python docs/hooks.py"
    ini = f"`{option.dest}`" if option.ini else "(command line only)"
    assert row.split(" | ")[1].strip() == ini


def test_help_shows_every_option_with_its_metavar(pytester):
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for option in OPTIONS:
        shown = option.flag if option.kind == "flag" else f"{option.flag}={option.metavar}"
        assert re.search(re.escape(shown) + r"\b", text), shown
        if option.ini:
            assert option.dest in text  # the ini-options section


def test_help_groups_hold_every_option_once_in_task_order(pytester):
    grouped = [flag for _, _, flags in HELP_GROUPS for flag in flags]
    assert sorted(grouped) == sorted(o.flag for o in OPTIONS) and len(grouped) == len(set(grouped))
    text = pytester.runpytest("--help").stdout.str()
    headings = [text.index(f"{description}:") for _, description, _ in HELP_GROUPS]
    assert headings == sorted(headings)  # groups in order: models first, local models last
    for (_, _, flags), start, end in zip(HELP_GROUPS, headings, headings[1:] + [len(text)]):
        for flag in flags:
            assert f"  {flag}" in text[start:end], (flag, text[start:end][:300])


def test_choices_errors_name_the_option_and_every_choice(pytester):
    pytester.makefile(".yaml", demo="socialbias: 1\nsuite: d\nprotocol: smoke\ncases: []\n")
    for option in OPTIONS:
        if not option.choices:
            continue
        result = pytester.runpytest(f"{option.flag}=nonsense")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        err = result.stderr.str()
        assert f"{option.flag}='nonsense'" in err
        choices = option.choices() if callable(option.choices) else option.choices
        assert all(choice in err for choice in choices), err
