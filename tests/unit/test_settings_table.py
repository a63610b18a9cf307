"""The settings tables: every NBWORKERS_* variable declared once (protocol/env_settings.py), parsed the same way
everywhere (a bad value warns and the default applies, never a crash), the site's environment table generated from
it, and every kernel-side setting (magics/settings.py) both declared and read."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from nbworkers.magics.settings import WorkerSettings
from nbworkers.protocol import env_settings
from nbworkers.protocol.env_settings import EnvSettingWarning

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("extension", "protocol", "procs", "host", "magics", "distlib", "kernelspec")
ENV_NAME = re.compile(r"NBWORKERS_[A-Z0-9_]*[A-Z0-9]")
BAD_VALUES = {
    env_settings.SECONDS: ["soon", "-1", "nan"],
    env_settings.POSITIVE_SECONDS: ["soon", "0", "nan"],
    env_settings.SWITCH: ["maybe", "2"],
    env_settings.AUTO_SWITCH: ["sometimes"],
}


def _sources(*suffixes: str):
    for folder in CODE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in suffixes and "__pycache__" not in path.parts:
                yield path


def _checked_settings():
    """(setting, bad value) for every declared variable whose parser can reject a value."""
    for setting in env_settings.ALL:
        if setting.parser in BAD_VALUES:
            values = BAD_VALUES[setting.parser]
        elif setting.parser.expects.startswith("a whole number"):
            values = ["many", "1.5"]
        else:
            continue
        for value in values:
            yield pytest.param(setting, value, id=f"{setting.name}={value}")


def test_check_fails_on_an_outdated_readme(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import env_table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n\n{env_table.BEGIN}\n| old | table |\n{env_table.END}\n\nafter\n", encoding="utf-8")
    assert env_table.main(["--check", "--readme", str(stale)]) == 1
    assert env_table.main(["--readme", str(stale)]) == 0
    assert env_table.main(["--check", "--readme", str(stale)]) == 0
    text = stale.read_text(encoding="utf-8")
    assert text.startswith("# x\n") and text.endswith("\nafter\n") and "| old | table |" not in text


def test_every_variable_the_code_names_is_declared():
    declared = {setting.name for setting in env_settings.ALL}
    undeclared = {}
    for path in _sources(".py", ".js"):
        for name in ENV_NAME.findall(path.read_text(encoding="utf-8")):
            if name not in declared:
                undeclared.setdefault(name, path.relative_to(ROOT).as_posix())
    assert not undeclared, f"declare these in protocol/env_settings.py: {undeclared}"


def test_no_module_spells_a_variable_name_itself():
    """Names come from env_settings (``env_settings.X.name`` or a constant made from it), never a second literal."""
    literals = []
    for path in _sources(".py"):
        if path.name == "env_settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_NAME.fullmatch(node.value):
                literals.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.value}")
    assert not literals


@pytest.mark.parametrize("setting,value", list(_checked_settings()))
def test_a_bad_value_warns_naming_the_variable_and_uses_the_default(setting, value):
    with pytest.warns(EnvSettingWarning) as caught:
        assert setting.get({setting.name: value}) == setting.default
    message = str(caught[0].message)
    assert setting.name in message and repr(value) in message and setting.parser.expects in message


@pytest.mark.parametrize("setting,text,value", [
    (env_settings.LEADER_WAIT, " 2.5 ", 2.5),
    (env_settings.REPORT_INTERVAL, "0", 0.0),
    (env_settings.KERAS3_FIX, "off", False),
    (env_settings.MOCK_DATA, "Yes", True),
    (env_settings.PREEMPTION, "TRUE", "1"),
    (env_settings.EARLY_COLLECTIVES, "Auto", "auto"),
    (env_settings.ZYGOTE_PREWARM, "Off", False),
    (env_settings.MOCK_EXAMPLES, "64", 64),
])
def test_good_values_parse(setting, text, value):
    assert setting.get({setting.name: text}) == value
    assert setting.get({}) == setting.default and setting.get({setting.name: "  "}) == setting.default


def test_the_modules_read_their_variables_through_the_table(monkeypatch):
    from nbworkers.distlib import data
    from nbworkers.distlib.compat.keras3 import mwms as keras3_mwms
    from nbworkers.distlib.worker import preemption
    from nbworkers.distlib.worker.mwms import collective_startup, leader_wait, worker_facts
    from nbworkers.host import worker_host as host

    monkeypatch.setenv("NBWORKERS_FACTS_TIMEOUT", "not-a-number")  # crashed the worker before the table
    with pytest.warns(EnvSettingWarning, match="NBWORKERS_FACTS_TIMEOUT"):
        assert worker_facts.exchange_timeout_s() == 120.0
    monkeypatch.setenv("NBWORKERS_LEADER_WAIT", "7")
    assert leader_wait.leader_wait_s() == 7.0
    monkeypatch.setenv("NBWORKERS_MAX_LINE_CHARS", "10")
    assert host.max_line_chars() == host.MIN_LINE_CHARS
    monkeypatch.setenv("NBWORKERS_PREEMPTION", "off")
    assert preemption.enabled() is False
    assert keras3_mwms.enabled({"NBWORKERS_KERAS3_FIX": "0"}) is False
    assert data.mock_data_requested({"NBWORKERS_MOCK_DATA": "on"}) is True
    monkeypatch.setenv("NBWORKERS_MOCK_MISSPELLED", "1")  # only declared names are read
    assert collective_startup.ENV_EARLY_COLLECTIVES == env_settings.EARLY_COLLECTIVES.name


def test_kernel_settings_take_their_defaults_from_the_table(monkeypatch, tmp_path):
    monkeypatch.setenv("NBWORKERS_RUN_ROOT", str(tmp_path))
    monkeypatch.setenv("NBWORKERS_ZYGOTE", "no")
    monkeypatch.setenv("NBWORKERS_ZYGOTE_PREWARM", "lots")
    with pytest.warns(EnvSettingWarning, match="NBWORKERS_ZYGOTE_PREWARM='lots'"):
        settings = WorkerSettings()
        assert settings.zygote_prewarm is True
    assert settings.run_root == str(tmp_path) and settings.zygote is False
    assert settings.max_line_chars == env_settings.MAX_LINE_CHARS.default


def test_every_kernel_setting_is_read_somewhere():
    """A setting declared and never read (``failure_grace`` was) does nothing; one read and never declared
    (``widget_chart_points`` was) cannot be set."""
    text = "\n".join(path.read_text(encoding="utf-8") for folder in ("extension", "magics", "host", "procs")
                     for path in (ROOT / folder).rglob("*.py") if path.name != "settings.py")
    traits = WorkerSettings.class_trait_names(config=True)
    unread = [name for name in traits if not re.search(rf"(\.{name}\b|[\"']{name}[\"'])", text)]
    assert not unread
    read = set(re.findall(r"getattr\(\w*settings\(\), \"(\w+)\"", text))
    read |= set(re.findall(r"(?:\bsettings\(\)|cluster\.settings)\.([a-z_]\w*)", text))  # the Ray backend has its own
    assert read and not read - set(traits) - {"trait_names"}


def test_one_preemption_exit_code():
    from nbworkers.distlib.worker import preemption
    from nbworkers.magics.run.core import failures
    from nbworkers.protocol import wire

    assert preemption.PREEMPTION_EXIT_CODE == wire.PREEMPTION_EXIT_CODE
    assert failures.PREEMPTION_EXIT_CODES == (wire.PREEMPTION_EXIT_CODE,)
