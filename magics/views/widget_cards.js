// nbworkers widget, the first part: status labels, formatting, the worker cards; the compact view's rows and heat strip.
// widget.py joins uPlot and these parts (ESM_PARTS, in their order) into the widget's one ES module.

// Every status a view shows, with its label: LOOKS in protocol/statuses.py (tests/unit/test_vocabulary.py holds these
// to it; the colours are generated from it into the widget's CSS: magics/views/words.py status_css).
const STATUS_LABELS = {
  queued: "queued", // a session cell waiting for the cells before it (magics/sessions/cell.py)
  starting: "starting",
  waiting: "waiting for peers",
  running: "running",
  restarting: "restarting",
  stopping: "stopping",
  finished: "finished",
  failed: "failed",
  stopped: "stopped",
  lost: "stopped", // its kernel restarted or died (LOST_LABEL in protocol/statuses.py): its workers are being stopped
  detached: "detached", // a --detach run's card in a view whose kernel restarted or died (kernelGoneStatus)
};
const DONE = new Set(["finished", "failed", "stopped", "lost"]); // ENDED in protocol/statuses.py (tests/unit/test_vocabulary.py)
// Why a run stopped when its kernel restarted or died (KERNEL_GONE in protocol/statuses.py; test_vocabulary.py)
const KERNEL_GONE = "stopped because its kernel restarted or died: run the cell again (--detach keeps a run across restarts)";
const DETAIL_STATES = new Set(["starting", "waiting", "restarting", "failed"]); // elsewhere a detail is stale, but:
// a session cell's stopped worker says why (magics/sessions/core/notes.py, distlib/worker/session.py)
const STOPPED_DETAIL = /^(aborted: worker \d+ failed|stopped at step \d+|stopped between two training steps)$/;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#65a30d"];
const TRACEBACK_LINES = 20;
const SIGNALS = { 1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM" };

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function fmtNumber(value) {
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return value.toExponential(3);
  return String(Number(value.toPrecision(4)));
}

// steps/s as the text views and the sidebar show it, one decimal ("9.7"): the widget's rows and overview do not
// flicker in the third digit every second
function fmtRate(value) {
  return typeof value === "number" && isFinite(value) ? value.toFixed(1) : String(value);
}

function fmtDuration(seconds) {
  if (typeof seconds !== "number" || !isFinite(seconds) || seconds < 0) return "-";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const total = Math.round(seconds);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const secs = String(total % 60).padStart(2, "0");
  return hours ? `${hours}h ${String(minutes).padStart(2, "0")}m ${secs}s` : `${minutes}m ${secs}s`;
}

function workerName(w) {
  return `#${w.index} ${w.role || "worker"}:${w.role_index ?? 0}`;
}

function chiefIndex(workers) {
  const chief = workers.find((w) => w.role === "chief");
  return chief ? chief.index : workers.length ? workers[0].index : 0;
}

function badge(status, label) {
  return h("span", { class: `nbw-badge nbw-status-${status}`, text: label || STATUS_LABELS[status] || status || "unknown" });
}

// How a worker's process ended, in words (as magics/views/summary.py exit_text): nothing for a clean exit or for a
// worker nbworkers stopped; "killed by SIGKILL" for a signal; "exit code 1" otherwise.
function exitText(w) {
  const code = w.exit_code;
  if (code === null || code === undefined || code === 0) return "";
  if (["stopped", "finished", "restarting"].includes(w.status)) return "";
  if (code < 0) return `killed by ${SIGNALS[-code] || "signal " + -code}`;
  return `exit code ${code}`;
}

// Where a restarted group went on (as magics/views/summary.py resume_text).
function resumeText(from) {
  if (!from) return "not resumed yet: its first step tells whether it resumes from a checkpoint";
  const { epoch, step } = from;
  if ((epoch === null || epoch === undefined || epoch <= 1) && (step === null || step === undefined || step <= 1)) {
    return "started from scratch (no checkpoint to resume from)";
  }
  const where = [epoch !== null && epoch !== undefined ? `epoch ${epoch}` : "", step !== null && step !== undefined ? `step ${step}` : ""];
  return `resumed from a checkpoint at ${where.filter(Boolean).join(", ")}`;
}

const TRACEBACK_START = "Traceback (most recent call last):"; // magics/sessions/core/notes.py

function tracebackTail(lines, limit = TRACEBACK_LINES) {
  let start = -1;
  for (let i = lines.length - 1; i >= 0; i--) {
    if (lines[i].includes(TRACEBACK_START)) {
      start = i;
      break;
    }
  }
  return (start >= 0 ? lines.slice(start) : lines).slice(-limit);
}

// ------------------------------------------------------------------------------------ cards

function progressRow(label, fraction) {
  if (fraction === null) return h("div", { class: "nbw-bar-row" }, h("span", { class: "nbw-bar-label", text: label }));
  const fill = h("div", { class: "nbw-bar-fill" });
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h("div", { class: "nbw-bar-row" }, h("span", { class: "nbw-bar-label", text: label }), h("div", { class: "nbw-bar" }, fill));
}

function renderCard(w) {
  const card = h("div", { class: `nbw-card nbw-card-${w.status}`, "data-index": w.index, "data-status": w.status });
  card.append(
    h("div", { class: "nbw-card-head" }, h("span", { class: "nbw-card-title", text: workerName(w) }), badge(w.status)),
  );
  const where = [w.host || "", w.pid ? `pid ${w.pid}` : ""].filter(Boolean).join(" · ");
  card.append(h("div", { class: "nbw-card-host", text: where || "\u00a0" }));

  const done = w.status === "finished";
  if (w.epoch !== null && w.epoch !== undefined) {
    // Reported epochs and steps are 1-based positions, as Keras prints them ("Epoch 2/3").
    const total = w.epochs_total;
    const within = w.steps_total && w.step !== null ? w.step / w.steps_total : 0;
    const fraction = done ? 1 : total ? (Math.max(w.epoch - 1, 0) + within) / total : null;
    card.append(progressRow(total ? `epoch ${w.epoch}/${total}` : `epoch ${w.epoch}`, fraction));
  }
  if (w.step !== null && w.step !== undefined) {
    const fraction = w.steps_total ? w.step / w.steps_total : null;
    card.append(progressRow(w.steps_total ? `step ${w.step}/${w.steps_total}` : `step ${w.step}`, fraction));
  }

  const names = Object.keys(w.metrics || {});
  if (names.length) {
    const table = h("table", { class: "nbw-metrics" });
    for (const name of names) {
      table.append(h("tr", {}, h("td", { text: name }), h("td", { class: "nbw-num", text: fmtNumber(w.metrics[name]) })));
    }
    card.append(table);
  }

  const foot = [];
  if (typeof w.steps_per_sec === "number") foot.push(`${fmtRate(w.steps_per_sec)} steps/s`);
  foot.push(`restarts ${w.restarts || 0}`);
  if (exitText(w)) foot.push(exitText(w));
  card.append(h("div", { class: "nbw-card-foot", text: foot.join(" · ") }));
  if (w.detail && (DETAIL_STATES.has(w.status) || (w.status === "stopped" && STOPPED_DETAIL.test(w.detail)))) card.append(h("div", { class: "nbw-card-detail", text: w.detail, title: w.detail }));
  return card;
}

// ------------------------------------------------------------------------------------ compact view (many workers)
// From settings().widget_compact_workers workers on the kernel fills the `compact` trait (magics/views/compact.py):
// the workers in straggler order, the metrics every worker shares, the flagged workers, the band chart. The cards
// give way to an overview line, a heat strip (one cell per worker) and one row per worker.

// How far a worker is, 0..1, or null (as compact.py progress_fraction; epochs and steps are 1-based).
function progressFraction(w) {
  if (w.status === "finished") return 1;
  const within = w.step !== null && w.step !== undefined && w.steps_total ? w.step / w.steps_total : 0;
  if (w.epoch !== null && w.epoch !== undefined && w.epochs_total) return Math.min(1, (Math.max(w.epoch - 1, 0) + within) / w.epochs_total);
  if (w.step !== null && w.step !== undefined && w.steps_total) return Math.min(1, within);
  return null;
}

function progressWords(w) {
  const parts = [];
  if (w.epoch !== null && w.epoch !== undefined) parts.push(w.epochs_total ? `ep ${w.epoch}/${w.epochs_total}` : `ep ${w.epoch}`);
  if (w.step !== null && w.step !== undefined) parts.push(w.steps_total ? `step ${w.step}/${w.steps_total}` : `step ${w.step}`);
  return parts.join(" · ");
}

// "4–7" for the lowest and highest of `values` as `fmt` prints them; one value once ("4", not "4–4").
function rangeText(values, fmt) {
  if (!values.length) return "";
  const lo = fmt(Math.min(...values));
  const hi = fmt(Math.max(...values));
  return lo === hi ? lo : `${lo}–${hi}`;
}

// One line over all workers: how many in each status, the progress and steps/s ranges, the shared metrics.
function renderOverview(workers, compact) {
  const counts = new Map();
  for (const w of workers) counts.set(w.status, (counts.get(w.status) || 0) + 1);
  const line = h("div", { class: "nbw-overview" });
  for (const [status, n] of [...counts].sort((a, b) => (a[0] === "running" ? -1 : b[0] === "running" ? 1 : 0))) {
    line.append(h("span", { class: `nbw-count nbw-count-${status}`, "data-status": status }, badge(status, `${n} ${STATUS_LABELS[status] || status}`)));
  }
  const fractions = workers.map(progressFraction).filter((f) => f !== null);
  const rates = workers.map((w) => w.steps_per_sec).filter((r) => typeof r === "number");
  const facts = [];
  if (fractions.length) facts.push(`progress ${rangeText(fractions, (f) => `${Math.round(f * 100)}`)} %`);
  if (rates.length) facts.push(`${rangeText(rates, fmtRate)} steps/s`);
  const restarts = workers.reduce((n, w) => n + (w.restarts || 0), 0);
  if (restarts) facts.push(`${restarts} worker restart${restarts === 1 ? "" : "s"}`);
  line.append(h("span", { class: "nbw-overview-facts", text: facts.join(" · ") }));
  const shared = Object.entries((compact && compact.shared) || {});
  if (shared.length) {
    const box = h("span", { class: "nbw-shared", title: "the same value on every worker" });
    box.append(h("span", { class: "nbw-shared-label", text: "every worker:" }));
    for (const [name, value] of shared) box.append(h("span", { class: "nbw-shared-metric" }, `${name} `, h("b", { text: fmtNumber(value) })));
    line.append(box);
  }
  return line;
}

function workerTip(w) {
  const parts = [workerName(w), STATUS_LABELS[w.status] || w.status, progressWords(w)];
  if (typeof w.steps_per_sec === "number") parts.push(`${fmtRate(w.steps_per_sec)} steps/s`);
  if (w.restarts) parts.push(`restarts ${w.restarts}`);
  return parts.filter(Boolean).join(" · ");
}

// The heat strip: one cell per worker in index order, its colour the status, its fill the progress.
function renderHeat(workers, flagged, picked, onPick) {
  const strip = h("div", { class: "nbw-heat", role: "list", "aria-label": "workers" });
  for (const w of workers) {
    const fraction = progressFraction(w);
    const cell = h("button", { type: "button", class: `nbw-heat-cell nbw-heat-${w.status}${flagged.has(w.index) ? " nbw-flagged" : ""}${w.index === picked ? " nbw-picked" : ""}`, "data-index": w.index, "data-status": w.status, title: workerTip(w) });
    const fill = h("span", { class: "nbw-heat-fill" });
    fill.style.height = `${Math.round((fraction === null ? 0 : fraction) * 100)}%`;
    cell.append(fill);
    cell.addEventListener("click", () => onPick(w.index));
    strip.append(cell);
  }
  return strip;
}

// One row per worker, stragglers first (the kernel's order): status, progress bar, steps/s, restarts, its own metrics.
function renderRows(workers, compact, flagged, picked, onPick) {
  const byIndex = new Map(workers.map((w) => [w.index, w]));
  const order = ((compact && compact.order) || []).filter((i) => byIndex.has(i));
  const table = h("table", { class: "nbw-rows" });
  table.append(h("thead", {}, h("tr", {}, ...["worker", "status", "progress", "steps/s", "restarts", "own metrics"].map((t) => h("th", { text: t })))));
  const body = h("tbody");
  for (const index of order.length ? order : workers.map((w) => w.index)) {
    const w = byIndex.get(index);
    const fraction = progressFraction(w);
    const words = progressWords(w);
    // a bar only where a share done is known; a worker that reported no step says so (not an empty grey bar)
    const bar = fraction === null ? "" : h("div", { class: "nbw-bar" }, h("div", { class: "nbw-bar-fill" }));
    if (bar) bar.firstChild.style.width = `${fraction * 100}%`;
    const status = h("td", {}, badge(w.status));
    if (exitText(w)) status.append(` ${exitText(w)}`);
    const own = Object.entries(w.metrics || {}).map(([k, v]) => `${k} ${fmtNumber(v)}`).join(" · ");
    const row = h("tr", { class: `nbw-row${w.index === picked ? " nbw-picked" : ""}`, "data-index": w.index, "data-status": w.status, title: w.detail || "" },
      h("td", { class: "nbw-row-name" }, flagged.has(w.index) ? h("span", { class: "nbw-flag", title: "errors or warnings in its log", text: "⚠ " }) : "", workerName(w)),
      status,
      h("td", {}, h("div", { class: "nbw-row-progress" }, bar, h("span", { class: "nbw-row-words", text: words || (DONE.has(w.status) ? "" : "no steps reported") }))),
      h("td", { class: "nbw-num", text: typeof w.steps_per_sec === "number" ? fmtRate(w.steps_per_sec) : "" }),
      h("td", { class: "nbw-num", text: String(w.restarts || 0) }),
      h("td", { class: "nbw-row-metrics", text: own }),
    );
    row.addEventListener("click", () => onPick(w.index));
    body.append(row);
  }
  table.append(body);
  return table;
}
