"""The site's generated reference (docs/_ext/nbworkers_docs.py) holds what the code defines: every option of the
magics' parsers, every setting, every REST route; and the hand-written tables of flags are checked against the
parsers (a flag missing from docs/reference/worker.md fails the build). No TensorFlow: distlib's autodoc page is
left to the site's build (tests/integration/test_tutorials.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("nbworkers_docs", ROOT / "docs" / "_ext" / "nbworkers_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("prog", ["%%worker", "%workers"])
def test_every_option_of_the_parser_is_in_the_generated_table_and_usage(gen, prog):
    from nbworkers.magics.notebook.magic import WorkerMagics

    parser = (WorkerMagics.worker if prog == "%%worker" else WorkerMagics.workers).parser
    table, usage = gen.options_table(prog), gen.usage_text(prog)
    options = [o for action in parser._actions for o in action.option_strings if o not in ("-h", "--help")]
    assert options and not [o for o in options if f"`{o}" not in table], table
    assert not [o for o in options if o not in usage], usage
    assert usage.startswith(f"usage: {prog}")


def test_the_hand_written_tables_name_every_flag_and_no_other(gen, tmp_path):
    gen.check_hand_table("%%worker", ROOT / "docs" / "reference" / "worker.md")
    gen.check_hand_table("%workers", ROOT / "docs" / "reference" / "workers.md")
    page = (ROOT / "docs" / "reference" / "worker.md").read_text(encoding="utf-8")
    stale = tmp_path / "worker.md"
    stale.write_text("\n".join(line for line in page.splitlines() if not line.startswith("| `--spread`"))
                     + "\n| `--no-such-flag` | — | x |\n", encoding="utf-8")
    with pytest.raises(gen.DocsError, match=r"missing \['--spread'\], not in the parser \['--no-such-flag'\]"):
        gen.check_hand_table("%%worker", stale)


def test_every_setting_is_in_the_settings_page(gen):
    from nbworkers.magics.backends.ray.ray_settings import RaySettings
    from nbworkers.magics.settings import WorkerSettings
    from nbworkers.serverext import NbworkersAPI

    text = gen.settings_tables()
    for cls in (WorkerSettings, RaySettings, NbworkersAPI):
        assert f"### `{cls.__name__}`" in text
        assert not [name for name in cls.class_traits(config=True) if f"| `{name}` |" not in text], cls
    assert "| `stop_grace` | Float | `5.0` |" in text


def test_every_route_of_the_server_extension_is_in_the_rest_page(gen):
    from nbworkers.serverext import handlers

    text = gen.rest_routes()
    for _, handler, _ in handlers("/", None, None):
        assert f"`{handler.__name__}`" in text
    assert "| GET, DELETE | `ClusterHandler` |" in text and "| POST | `RestartHandler` |" in text
