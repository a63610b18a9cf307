"""The facts the README and the documentation site state that the code defines, held by the code (issue 34: the README
said `widget` defaults to False). The README's sections moved into the site's pages (docs/*.md, issue 44): these tests
read README.md and every hand-written page (not docs/_generated/, which is written from the code itself).

- every default the README states for a setting, written ``name`` (VALUE ...), ``name``, VALUE or ``name`` VALUE,
  anywhere in it: against ``magics/settings.py`` (``WorkerSettings``) and the REST API's ``NbworkersAPI``;
- every ``NBWORKERS_*`` it names is declared in ``protocol/env_settings.py``, and a default it states beside one
  (``NBWORKERS_X`` (1 s)) is the declared one (the Environment variables table itself: tools/env_table.py --check);
- the sidebar's figures (Log: the last N lines, refreshed every S s; the polling) against labextension/;
- the zygote's memory: the figures the README gives are the ones ``benchmarks/zygote.py`` measured
  (benchmarks/results.md), never a round number of its own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol import env_settings

ROOT = Path(__file__).resolve().parents[2]
DEVELOPMENT = ROOT / "docs" / "development.md"  # names the tests' own variables
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "_generated" not in p.parts and ".ipynb_checkpoints" not in p.parts)
TEXTS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in PAGES}
README = "\n".join(TEXTS.values())  # every page's text at once, for the facts stated once somewhere
UNITS = {"s": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
NUMBER = r"\d+(?:\.\d+)?(?: ?(?:s|KiB|MiB|GiB))?"
END = r"(?=[\s),;:])"
# `name` (VALUE ...: a number, True/False or a `word`; `name`, VALUE and `name` VALUE: a number or True/False
STATED = re.compile(rf"`(?P<name>\w+)`(?:\s+\((?P<value>True|False|`[\w-]+`|{NUMBER}){END}"
                    rf"|(?:,\s+|\s+)(?P<bare>True|False|{NUMBER}){END})")
# the variables nbworkers reads: every page but Development (and the README's part above one), which names the tests'
USER_DOCS = "\n".join(text.split("\n## Development\n")[0] for name, text in TEXTS.items() if ROOT / name != DEVELOPMENT)


def _parse(text: str) -> object:
    """A value as the README writes it: True/False, `word`, a number with an optional unit (s, KiB, MiB, GiB)."""
    if text in ("True", "False"):
        return text == "True"
    if text.startswith("`"):
        return text.strip("`")
    number, _, unit = " ".join(text.split()).partition(" ")
    if not unit and number[-1:] == "s":  # "5s"
        number, unit = number[:-1], "s"
    value = float(number) * UNITS.get(unit, 1)
    return int(value) if value.is_integer() else value


def _stated(names: set[str]) -> list[tuple[str, object, str]]:
    """(name, value, "page:line") for every default the README or a page states for one of ``names``."""
    return [(m["name"], _parse(m["value"] or m["bare"]), f"{page}:{text.count(chr(10), 0, m.start()) + 1}")
            for page, text in TEXTS.items() for m in STATED.finditer(text) if m["name"] in names]


@pytest.fixture
def defaults(monkeypatch) -> dict[str, object]:
    """Every setting's default as a fresh kernel has it (no NBWORKERS_* in the environment): the kernel side's,
    then the REST API's that the kernel side does not have."""
    for setting in env_settings.ALL:
        monkeypatch.delenv(setting.name, raising=False)
    from nbworkers.serverext import NbworkersAPI

    kernel = WorkerSettings()
    found = {name: getattr(kernel, name) for name in kernel.trait_names(config=True)}
    api = NbworkersAPI()
    found.update({name: getattr(api, name) for name in api.trait_names(config=True) if name not in found})
    return found


def test_every_default_the_readme_states_for_a_setting_is_the_codes(defaults):
    stated = _stated(set(defaults))
    assert len(stated) >= 55, stated  # the settings paragraph, the sessions section, Security model, ...
    wrong = [f"{line}: `{name}` ({value!r}), the code's default is {defaults[name]!r}"
             for name, value, line in stated if value != defaults[name]]
    assert not wrong, "\n".join(wrong)


def test_every_setting_is_in_the_readme(defaults):
    assert not [name for name in defaults if f"`{name}`" not in README]


def test_the_widget_setting_is_stated_as_on():
    assert ("widget", True) in [(name, value) for name, value, _ in _stated({"widget"})]


def test_every_variable_the_readme_names_is_declared_with_the_default_it_states():
    declared = {setting.name: setting for setting in env_settings.ALL}
    named = set(re.findall(r"NBWORKERS_[A-Z0-9_]*[A-Z0-9]", USER_DOCS))
    assert named and not named - set(declared), sorted(named - set(declared))
    wrong = []
    for name, value, line in _stated(set(declared)):
        default = declared[name].default
        if not isinstance(default, bool) and isinstance(default, (int, float)):
            default = _parse(str(default))
        if value != default:
            wrong.append(f"{line}: `{name}` ({value!r}), declared default {default!r}")
    assert not wrong, "\n".join(wrong)


def test_the_command_sockets_frame_limit_is_the_codes():
    from nbworkers.magics.sessions.channel import MAX_MESSAGE_BYTES

    [stated] = set(re.findall(r"(\d+) KiB on the command socket", README))  # the same figure wherever it is stated
    assert int(stated) * 2**10 == MAX_MESSAGE_BYTES


def test_the_sidebars_figures_are_its_own():
    lines = re.search(r"LOG_TAIL_LINES = (\d+)", (ROOT / "labextension" / "src" / "logview.ts").read_text())
    schema = json.loads((ROOT / "labextension" / "schema" / "sidebar.json").read_text())["properties"]
    log_row = re.search(r"the last (\d+) lines, refreshed every (\d+(?:\.\d+)?) s", README)
    assert lines and log_row and log_row.group(1) == lines.group(1)
    assert float(log_row.group(2)) == schema["logRefreshSeconds"]["default"]
    polling = re.search(r"It polls the REST API \(below\) every (second|[\d.]+ s) while shown, every ([\d.]+) s while "
                        r"hidden", README)
    assert polling, "the sidebar's polling sentence (docs/guides/sidebar.md) moved: update this test"
    shown = 1.0 if polling.group(1) == "second" else float(polling.group(1).split()[0])
    assert shown == schema["pollVisibleSeconds"]["default"]
    assert float(polling.group(2)) == schema["pollHiddenSeconds"]["default"]


def test_the_zygotes_memory_is_the_benchmarks_measure():
    results = (ROOT / "benchmarks" / "results.md").read_text(encoding="utf-8")
    measured = re.search(r"\| zygote: memory held between runs \(RSS / PSS\)\s*\| (\d+) / (\d+) MB", results)
    assert measured, "benchmarks/results.md has no zygote memory row: run `make bench` or drop the README's figures"
    rss, pss = measured.groups()
    assert f"| {rss} / {pss} MB |" in README  # the Benchmarks table
    held = re.findall(r"(\d+) MB \(RSS, measured", README)  # where the README says what a zygote holds
    assert held and set(held) == {rss}, held
    assert not re.search(r"0\.5 GB", README), "a round figure for the zygote's memory: give the measured one"
