// nbworkers widget: the browser tab's title. Joined after widget_chart.js, before widget_header.js.
// A running run's progress in front of the page's title ("[ep 2/5 · 43%] notebook.ipynb"), gone when the run ends
// or the view goes away. Every view on the page shares one registry (globalThis: anywidget may load this module
// once per widget, so the views' ids are counted there too). The title shows the runs of the notebook in view
// only, the newest one and "+N" for the others: JupyterLab's other notebooks are hidden tabs (lm-mod-hidden).
// JupyterLab rewrites the title when the current tab changes, so a MutationObserver puts the prefix back.

function titleProgress(c, chief) {
  if (!c || DONE.has(c.status)) return null;
  const w = (c.workers || []).find((x) => x.index === chief) || (c.workers || [])[0];
  if (!w) return null;
  const fraction = progressFraction(w);
  const parts = [];
  if (w.epoch !== null && w.epoch !== undefined) parts.push(w.epochs_total ? `ep ${w.epoch}/${w.epochs_total}` : `ep ${w.epoch}`);
  else if (w.step !== null && w.step !== undefined) parts.push(w.steps_total ? `step ${w.step}/${w.steps_total}` : `step ${w.step}`);
  if (fraction !== null) parts.push(`${Math.floor(fraction * 100)}%`);
  return parts.length ? parts.join(" · ") : STATUS_LABELS[c.status] || c.status || null;
}

function titleRegistry() {
  if (!globalThis.__nbworkersTitle) globalThis.__nbworkersTitle = { runs: new Map(), prefix: "", observer: null, views: 0 };
  return globalThis.__nbworkersTitle;
}

// A name for a new view, unique on the page ("nbw-view-3").
function nextViewId() {
  const reg = titleRegistry();
  reg.views = (reg.views || 0) + 1;
  return `nbw-view-${reg.views}`;
}

// Whether a run's view is in the document the reader looks at: not in a hidden tab (another notebook of
// JupyterLab's); a page without notebook panels (Notebook 7 has one, other front ends none) counts as one. The
// panel is remembered: a notebook that windows its cells takes a cell scrolled far away out of the page.
function inView(run) {
  if (run.node && run.node.isConnected) run.panel = run.node.closest(".jp-NotebookPanel, .jp-MainAreaWidget");
  else if (run.panel === undefined) return false; // not on the page yet
  return !run.panel || (run.panel.isConnected !== false && !run.panel.closest(".lm-mod-hidden"));
}

function titleText(reg) {
  const texts = [...reg.runs.values()].filter(inView).map((run) => run.text);
  return texts.length ? `[${texts[texts.length - 1]}${texts.length > 1 ? ` +${texts.length - 1}` : ""}] ` : "";
}

function applyTitle(reg) {
  const current = document.title;
  const base = reg.prefix && current.startsWith(reg.prefix) ? current.slice(reg.prefix.length) : current;
  reg.prefix = titleText(reg);
  if (current !== reg.prefix + base) document.title = reg.prefix + base;
  const node = document.querySelector("title");
  if (reg.runs.size && !reg.observer && node && typeof MutationObserver === "function") {
    reg.observer = new MutationObserver(() => {
      if (!document.title.startsWith(reg.prefix) || titleText(reg) !== reg.prefix) applyTitle(reg);
    });
    reg.observer.observe(node, { childList: true, characterData: true, subtree: true });
  } else if (!reg.runs.size && reg.observer) {
    reg.observer.disconnect();
    reg.observer = null;
  }
}

// `text`: view `id`'s progress, or null to take it off the title; `node`: the view's element (where it is shown).
function setTitleProgress(id, text, node) {
  if (typeof document === "undefined") return;
  const reg = titleRegistry();
  if (text) reg.runs.set(id, { ...reg.runs.get(id), text, node });
  else if (!reg.runs.delete(id)) return;
  applyTitle(reg);
}
