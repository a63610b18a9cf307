"""The widget's pure JavaScript (magics/views/widget_cards.js, widget_title.js) run by node, without a browser.

The parts are one module's text (widget.py ESM_PARTS); the ones loaded here declare functions and constants only,
so node runs them with a small stand-in for the page's title: the overview's ranges ("4 %" for one value, not
"4–4 %"), unique view ids, and a tab title that shows the runs of the notebook in view only ("+1" for more), none
once they ended. tests/integration/test_browser_widget_many.py sees the same in a real JupyterLab page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

VIEWS = Path(__file__).resolve().parents[2] / "magics" / "views"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (apt-get install nodejs)")

HARNESS = r"""
globalThis.document = { title: "nb.ipynb - JupyterLab", querySelector: () => null };
// a view's node: in a notebook panel that is hidden (another tab of JupyterLab's) or not
const panel = (hidden) => ({ isConnected: true, closest: (sel) => (sel.includes("hidden") && hidden ? {} : null) });
const node = (hidden) => ({ isConnected: true, closest: () => panel(hidden) });
const percent = (f) => `${Math.round(f * 100)}`;
const out = {
  one: rangeText([0.041, 0.044, 0.043], percent),
  two: rangeText([0.041, 0.074], percent),
  rates: rangeText([2.0, 2.0], fmtRate),
  jitter: rangeText([9.669, 9.882], fmtRate),
  ids: [nextViewId(), nextViewId(), nextViewId()],
};
const run = (status, epoch) => ({ status, workers: [{ index: 0, epoch, epochs_total: 5, step: 50, steps_total: 100 }] });
const here = node(false), there = node(true), alsoHere = node(false);
setTitleProgress("a", titleProgress(run("running", 2), 0), here);
setTitleProgress("b", titleProgress(run("running", 4), 0), there);  // another notebook's run
out.mine = document.title;
setTitleProgress("c", titleProgress(run("running", 3), 0), alsoHere);
out.two_here = document.title;
alsoHere.isConnected = false;  // its cell scrolled far away (a windowed notebook): still this notebook's run
setTitleProgress("c", titleProgress(run("running", 3), 0), alsoHere);
out.scrolled_away = document.title;
setTitleProgress("c", titleProgress(run("finished", 5), 0), alsoHere);  // it ended: off the title
setTitleProgress("a", titleProgress(run("stopped", 2), 0), here);
out.ended = document.title;
console.log(JSON.stringify(out));
"""


ISOLATION_HARNESS = r"""
console.log(JSON.stringify({
  namespace: isolationBadge({ mode: "namespace" }),
  off: isolationBadge({ mode: "off", reason: "isolation is off for this run (--isolation off / the isolation setting)" }),
  ray: isolationBadge({ mode: "off", reason: "Ray nodes: ...", ray_tls: "on" }),
  none: [isolationBadge(undefined), isolationBadge(null), isolationBadge({})],
}));
"""


def run_node(*parts: str, harness: str = HARNESS) -> dict:
    source = "\n".join((VIEWS / part).read_text(encoding="utf-8") for part in parts) + harness
    done = subprocess.run([NODE, "--input-type=module", "-"], input=source, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ranges_ids_and_the_tab_title():
    out = run_node("widget_cards.js", "widget_title.js")
    assert out["one"] == "4" and out["two"] == "4–7" and out["rates"] == "2.0"
    assert out["jitter"] == "9.7–9.9"  # steps/s as the text views show them: no third digit flickering
    assert len(set(out["ids"])) == 3
    assert out["mine"] == "[ep 2/5 · 30%] nb.ipynb - JupyterLab"  # not the hidden notebook's ep 4
    assert out["two_here"] == "[ep 3/5 · 50% +1] nb.ipynb - JupyterLab"  # the newest of the two
    assert out["scrolled_away"] == out["two_here"]
    assert out["ended"] == "nb.ipynb - JupyterLab"


def test_the_headers_isolation_badge_and_its_tooltip():
    """The run's isolation (state.json's, in the snapshot): "isolation: namespace" or "isolation: off", why as the
    tooltip, with Ray's TLS on a Ray run; nothing for a run that recorded none. (The browser tests see the badge.)"""
    out = run_node("widget_cards.js", "widget_title.js", "widget_header.js", harness=ISOLATION_HARNESS)
    assert out["namespace"]["text"] == "isolation: namespace" and "private network namespace" in out["namespace"]["title"]
    assert out["off"]["text"] == "isolation: off"
    assert out["off"]["title"] == "Not isolated: isolation is off for this run (--isolation off / the isolation setting)."
    assert out["ray"]["title"].endswith("Ray's TLS: on.") and out["ray"]["mode"] == "off"
    assert out["none"] == [None, None, None]


GONE_HARNESS = r"""
globalThis.document = { createTextNode: (text) => ({ text }), createElement: (tag) => ({ tag, setAttribute() {} }) };
const node = { replaceChildren(...children) { this.children = children; } };
setCodeText(node, "run `%workers attach plain` in a cell");
console.log(JSON.stringify({
  plain: ["", "running", "stopped", "lost"].map((s) => kernelGoneStatus(false, s)),
  detach: ["", "running", "finished"].map((s) => kernelGoneStatus(true, s)),
  code: node.children.map((c) => (c.tag ? `<${c.tag}>${c.textContent}` : c.text)),
}));
"""


def test_a_view_whose_kernel_went_away_says_detached_for_a_detach_run_only():
    """After Restart Kernel a view hears from its run no more: a run started without --detach reads "stopping" until
    the server says how it ended, never "detached" (the --detach feature's word); a --detach run reads "detached"
    (it goes on). Backticked commands in a message become code, not literal backticks."""
    out = run_node("widget_cards.js", "widget_title.js", "widget_header.js", harness=GONE_HARNESS)
    assert out["plain"] == ["stopping", "stopping", "stopped", "lost"]
    assert out["detach"] == ["detached", "detached", "finished"]
    assert out["code"] == ["run ", "<code>%workers attach plain", " in a cell"]


ROWS_HARNESS = r"""
const node = (tag) => ({ tag, children: [], style: {}, attrs: {}, textContent: "",
  setAttribute(k, v) { this.attrs[k] = v; }, append(c) { this.children.push(c); }, addEventListener() {},
  get firstChild() { return this.children[0]; } });
globalThis.document = { createElement: node, createTextNode: (text) => ({ text }) };
const find = (n, cls, out = []) => { if (n && n.className === cls) out.push(n); for (const c of (n && n.children) || []) find(c, cls, out); return out; };
const workers = [
  { index: 0, status: "running", epoch: 2, epochs_total: 4, step: 5, steps_total: 10 },
  { index: 1, status: "running" },  // printed, reported no step
  { index: 2, status: "finished" },
];
const table = renderRows(workers, null, new Set(), null, () => {});
console.log(JSON.stringify({
  bars: find(table, "nbw-bar").length,
  words: find(table, "nbw-row-words").map((n) => n.textContent),
}));
"""


def test_the_compact_rows_show_a_bar_only_where_progress_is_known_and_say_when_none_was_reported():
    """16 workers that print and report no step: no empty grey bar without a label, but "no steps reported"."""
    out = run_node("widget_cards.js", harness=ROWS_HARNESS)
    assert out["bars"] == 2  # worker 0 (ep 2/4, step 5/10) and the finished worker 2; none for worker 1
    assert out["words"] == ["ep 2/4 · step 5/10", "no steps reported", ""]
