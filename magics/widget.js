// nbworkers live training widget (anywidget ESM, no build step, no network).
// State comes from four synced traits: cluster (header + cards), logs, series (chart), notice.

const STATUS_LABELS = {
  starting: "starting",
  waiting: "waiting for peers",
  running: "running",
  finished: "finished",
  failed: "failed",
  stopped: "stopped",
  restarting: "restarting",
};
const DONE = new Set(["finished", "failed", "stopped"]);
const DETAIL_STATES = new Set(["starting", "waiting", "restarting", "failed"]); // elsewhere a detail is stale
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#65a30d"];
const SVG_NS = "http://www.w3.org/2000/svg";
const BUTTON_PENDING_MS = 8000;
const TRACEBACK_LINES = 20;
const DEAD_KERNEL_STATES = new Set(["restarting", "autorestarting", "dead"]);
const ATTACH_POLL_MS = 2000; // detached: how often the run's state is read from the server extension ...
const ATTACH_POLLS = 30; // ... and how many times, until it says the run ended
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

function s(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

function fmtNumber(value) {
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return value.toExponential(3);
  return String(Number(value.toPrecision(4)));
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

// How a worker's process ended, in words (as magics/summary.py exit_text): nothing for a clean exit or for a
// worker nbworkers stopped; "killed by SIGKILL" for a signal; "exit code 1" otherwise.
function exitText(w) {
  const code = w.exit_code;
  if (code === null || code === undefined || code === 0) return "";
  if (["stopped", "finished", "restarting"].includes(w.status)) return "";
  if (code < 0) return `killed by ${SIGNALS[-code] || "signal " + -code}`;
  return `exit code ${code}`;
}

// Where a restarted group went on (as magics/summary.py resume_text).
function resumeText(from) {
  if (!from) return "not resumed yet: its first step tells whether it resumes from a checkpoint";
  const { epoch, step } = from;
  if ((epoch === null || epoch === undefined || epoch <= 1) && (step === null || step === undefined || step <= 1)) {
    return "started from scratch (no checkpoint to resume from)";
  }
  const where = [epoch !== null && epoch !== undefined ? `epoch ${epoch}` : "", step !== null && step !== undefined ? `step ${step}` : ""];
  return `resumed from a checkpoint at ${where.filter(Boolean).join(", ")}`;
}

// The Jupyter server's base URL (JupyterLab and Notebook 7 put it in the page's config data).
function baseUrl() {
  try {
    const node = document.getElementById("jupyter-config-data");
    const url = node ? JSON.parse(node.textContent).baseUrl : "/";
    return url && url.endsWith("/") ? url : `${url || ""}/`;
  } catch (e) {
    return "/";
  }
}

function tracebackTail(lines, limit = TRACEBACK_LINES) {
  let start = -1;
  for (let i = lines.length - 1; i >= 0; i--) {
    if (lines[i].includes("Traceback (most recent call last)")) {
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
  if (typeof w.steps_per_sec === "number") foot.push(`${fmtNumber(w.steps_per_sec)} steps/s`);
  foot.push(`restarts ${w.restarts || 0}`);
  if (exitText(w)) foot.push(exitText(w));
  card.append(h("div", { class: "nbw-card-foot", text: foot.join(" · ") }));
  if (w.detail && DETAIL_STATES.has(w.status)) card.append(h("div", { class: "nbw-card-detail", text: w.detail, title: w.detail }));
  return card;
}

// ------------------------------------------------------------------------------------ chart

function niceTicks(lo, hi, count = 5, minStep = 0) {
  if (!(hi > lo)) return [lo];
  const raw = Math.max((hi - lo) / count, minStep);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= raw) || raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function drawChart(svg, legend, series, metric, only, workers) {
  const width = Math.max(240, Math.floor(svg.parentNode.clientWidth || 600));
  const height = 220;
  const pad = { left: 56, right: 12, top: 10, bottom: 34 };
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  legend.replaceChildren();

  const lines = [];
  for (const entry of series || []) {
    if (only !== null && entry.index !== only) continue;
    const ys = (entry.metrics || {})[metric] || [];
    const pts = [];
    for (let i = 0; i < entry.x.length; i++) {
      const y = ys[i];
      if (typeof y === "number" && isFinite(y)) pts.push([entry.x[i], y]);
    }
    lines.push({ index: entry.index, pts });
  }
  const all = lines.flatMap((l) => l.pts);
  svg.dataset.points = String(all.length);
  if (!all.length) {
    const t = s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "nbw-chart-empty" });
    t.textContent = metric ? `no ${metric} values yet` : "no metrics reported yet";
    svg.append(t);
    return;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) [y0, y1] = [y0 - Math.abs(y0 || 1) * 0.05, y1 + Math.abs(y1 || 1) * 0.05];
  const margin = (y1 - y0) * 0.05;
  y0 -= margin;
  y1 += margin;
  const X = (x) => pad.left + ((x - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const Y = (y) => height - pad.bottom - ((y - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);

  const axes = s("g", { class: "nbw-axes" });
  for (const v of niceTicks(y0, y1)) {
    axes.append(s("line", { x1: pad.left, x2: width - pad.right, y1: Y(v), y2: Y(v), class: "nbw-grid" }));
    const label = s("text", { x: pad.left - 6, y: Y(v) + 4, "text-anchor": "end" });
    label.textContent = fmtNumber(v);
    axes.append(label);
  }
  for (const v of niceTicks(x0, x1, 6, 1)) {
    if (v < x0 || v > x1) continue;
    const label = s("text", { x: X(v), y: height - pad.bottom + 14, "text-anchor": "middle" });
    label.textContent = fmtNumber(v);
    axes.append(label);
  }
  axes.append(s("line", { x1: pad.left, x2: pad.left, y1: pad.top, y2: height - pad.bottom, class: "nbw-axis" }));
  axes.append(s("line", { x1: pad.left, x2: width - pad.right, y1: height - pad.bottom, y2: height - pad.bottom, class: "nbw-axis" }));
  const xlabel = s("text", { x: width - pad.right, y: height - 3, "text-anchor": "end", class: "nbw-axis-label" });
  xlabel.textContent = "step";
  axes.append(xlabel);
  svg.append(axes);

  for (const line of lines) {
    if (!line.pts.length) continue;
    const color = COLORS[line.index % COLORS.length];
    // A step going backwards is a restart: start a new segment instead of drawing back across the chart.
    const d = line.pts
      .map((p, i) => `${i && p[0] >= line.pts[i - 1][0] ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`)
      .join("");
    svg.append(s("path", { d, stroke: color, class: "nbw-line", "data-worker": line.index, "data-points": line.pts.length }));
    const [lx, ly] = line.pts[line.pts.length - 1];
    svg.append(s("circle", { cx: X(lx), cy: Y(ly), r: 3, fill: color }));
    const w = workers.find((x) => x.index === line.index);
    const item = h("span", { class: "nbw-legend-item" });
    const swatch = h("span", { class: "nbw-swatch" });
    swatch.style.background = color;
    item.append(swatch, `${w ? workerName(w) : "#" + line.index}: ${fmtNumber(ly)} @ ${fmtNumber(lx)}`);
    legend.append(item);
  }
}

// ------------------------------------------------------------------------------------ view

function render({ model, el }) {
  const root = h("div", { class: "nbw" });
  el.append(root);

  const title = h("span", { class: "nbw-title" });
  const headBadge = h("span");
  const meta = h("span", { class: "nbw-meta" });
  const notice = h("span", { class: "nbw-notice" });
  const stopButton = h("button", { class: "nbw-button nbw-stop", type: "button", text: "Stop", title: "Stop every worker" });
  const restartButton = h("button", { class: "nbw-button nbw-restart", type: "button", text: "Restart", title: "Restart the whole group" });
  const header = h("div", { class: "nbw-header" }, title, headBadge, meta, notice, h("span", { class: "nbw-spacer" }), stopButton, restartButton);
  const error = h("pre", { class: "nbw-error" });
  const cards = h("div", { class: "nbw-cards" });

  const metricSelect = h("select", { class: "nbw-metric", title: "Metric to plot" });
  const scopeSelect = h("select", { class: "nbw-scope", title: "Workers to plot" });
  scopeSelect.append(h("option", { value: "all", text: "all workers" }), h("option", { value: "chief", text: "chief only" }));
  const svg = s("svg", { class: "nbw-chart", role: "img" });
  const legend = h("div", { class: "nbw-legend" });
  const chartPanel = h(
    "div",
    { class: "nbw-panel nbw-chart-panel" },
    h("div", { class: "nbw-controls" }, h("span", { class: "nbw-panel-title", text: "Metrics" }), h("label", {}, "metric ", metricSelect), h("label", {}, "show ", scopeSelect)),
    h("div", { class: "nbw-chart-box" }, svg),
    legend,
  );

  const tabs = h("div", { class: "nbw-tabs" });
  const logPath = h("div", { class: "nbw-logpath" });
  const logPre = h("pre", { class: "nbw-log", tabindex: "0" });
  const logPanel = h("div", { class: "nbw-panel nbw-log-panel" }, h("div", { class: "nbw-controls" }, h("span", { class: "nbw-panel-title", text: "Log" }), tabs), logPre, logPath);

  // sessions (%%worker --session): one line under the header: session, cell number, its state, what it runs
  const sessionLine = h("div", { class: "nbw-session", style: "font-size:0.85em;opacity:0.8;margin:2px 0 6px" });
  root.append(header, sessionLine, error, cards, h("div", { class: "nbw-panels" }, chartPanel, logPanel));
  function renderSession() {
    const info = model.get("session") || {};
    sessionLine.style.display = info.name ? "" : "none";
    if (!info.name) return;
    sessionLine.dataset.cell = String(info.cell);
    sessionLine.dataset.state = info.state || "";
    sessionLine.textContent = `session ${info.name} · cell ${info.cell} · ${info.state}` + (info.running ? ` · ${info.running}` : "");
  }
  renderSession();
  model.on("change:session", renderSession);

  let closed = false;
  let attachTimer = null;
  const local = {
    follow: true, metric: null, scope: "all", logWorker: 0, receivedAt: Date.now(), pending: null, pendingTimer: null,
    detached: "", attached: "",  // detached: why this view no longer hears from its kernel; attached: the run's state then
  };

  function cluster() {
    return model.get("cluster") || {};
  }

  function renderHeader() {
    const c = cluster();
    const workers = c.workers || [];
    title.textContent = c.name ? `Cluster ${c.name}` : "Cluster";
    if (local.detached) headBadge.replaceChildren(badge("detached", "detached"));
    else headBadge.replaceChildren(badge(c.status || "starting", c.status === "stopped" ? "stopped by you" : ""));
    root.dataset.status = c.status || "";
    root.dataset.detached = local.detached ? "1" : "";
    let wall = c.wall_time;
    if (typeof wall === "number" && !DONE.has(c.status) && !local.detached) wall += (Date.now() - local.receivedAt) / 1000;
    const parts = [`${workers.length} worker${workers.length === 1 ? "" : "s"}`, fmtDuration(wall)];
    if (c.backend && c.backend !== "local") parts.push(c.backend);
    if (c.restarts) parts.push(`${c.restarts} restart${c.restarts === 1 ? "" : "s"}`);
    const history = c.restart_history || [];
    if (history.length) parts.push(`last restart: ${describeRestart(history[history.length - 1])}`);
    meta.textContent = parts.join(" · ");
    const done = DONE.has(c.status);
    stopButton.disabled = done || local.pending === "stop" || !!local.detached;
    restartButton.disabled = local.pending === "restart" || !!local.detached; // after a run, Restart runs it again
    notice.textContent = local.detached ? detachedText() : model.get("notice") || "";
    renderError();
  }

  function describeRestart(r) {
    return `${r.kind || "restart"} (${r.cause || ""}), ${resumeText(r.resumed_from)}`;
  }

  // ---- a kernel that restarted or died: this view is detached from its run
  function detachedText() {
    const name = cluster().name || "NAME";
    const state = local.attached ? ` The server sees the run as: ${local.attached}.` : "";
    return `${local.detached}: this view no longer updates.${state} Run \`%workers attach ${name}\` in a cell for the run's state and logs.`;
  }

  function detach(reason) {
    if (local.detached) return;
    local.detached = reason;
    clearPending();
    renderHeader();
    lookUpRun();
  }

  // What `%workers attach NAME` would show, from the server extension (it reads the run's state file), read
  // again every ATTACH_POLL_MS until the run ended there (the old kernel's worker hosts stop its workers).
  async function lookUpRun(polls = ATTACH_POLLS) {
    const name = cluster().name;
    if (!name || typeof fetch !== "function" || closed) return;
    let ended = false;
    try {
      const reply = await fetch(`${baseUrl()}nbworkers/api/clusters/${encodeURIComponent(name)}`, { credentials: "same-origin" });
      if (!reply.ok) return; // no server extension, or no such run: the text without its state says enough
      const data = await reply.json();
      ended = DONE.has(data.status) || data.status === "lost";
      local.attached = `${data.status}${data.error ? ` (${data.error})` : ""}`;
      renderHeader();
    } catch (e) {
      return;
    }
    if (!ended && polls > 1) attachTimer = setTimeout(() => lookUpRun(polls - 1), ATTACH_POLL_MS);
  }

  function renderError() {
    const c = cluster();
    const logs = model.get("logs") || [];
    const causes = c.restart_causes || [];
    const parts = [c.error || ""];
    if (c.status === "restarting" && causes.length) parts.push(`restarting: ${causes[causes.length - 1]}`);
    (c.workers || []).forEach((w, i) => {
      if (w.status !== "failed") return;
      const tail = tracebackTail(logs[i] || []);
      if (tail.length) parts.push(`--- ${workerName(w)}, last lines of its log:\n${tail.join("\n")}`);
    });
    const text = parts.filter(Boolean).join("\n");
    error.textContent = text;
    error.style.display = text ? "" : "none";
  }

  function renderCards() {
    const workers = cluster().workers || [];
    cards.replaceChildren(...workers.map(renderCard));
  }

  function renderChart() {
    const c = cluster();
    const workers = c.workers || [];
    const series = model.get("series") || [];
    const names = [...new Set(series.flatMap((e) => Object.keys(e.metrics || {})))].sort();
    if (!local.metric || !names.includes(local.metric)) {
      local.metric = names.includes("loss") ? "loss" : names[0] || null;
    }
    const options = names.map((n) => h("option", { value: n, text: n }));
    metricSelect.replaceChildren(...options);
    if (local.metric) metricSelect.value = local.metric;
    metricSelect.disabled = !names.length;
    const only = local.scope === "chief" ? chiefIndex(workers) : null;
    drawChart(svg, legend, series, local.metric, only, workers);
  }

  function renderLogs() {
    const workers = cluster().workers || [];
    const logs = model.get("logs") || [];
    if (local.logWorker >= workers.length) local.logWorker = 0;
    tabs.replaceChildren(
      ...workers.map((w, i) => {
        const tab = h("button", { type: "button", class: `nbw-tab${i === local.logWorker ? " nbw-tab-active" : ""}`, text: workerName(w), "data-index": i });
        tab.addEventListener("click", () => {
          local.logWorker = i;
          local.follow = true;
          renderLogs();
        });
        return tab;
      }),
    );
    const lines = logs[local.logWorker] || [];
    logPre.textContent = lines.length ? lines.join("\n") : "(no output yet)";
    if (local.follow) {
      logPre.scrollTop = logPre.scrollHeight;
      requestAnimationFrame(() => (logPre.scrollTop = logPre.scrollHeight)); // first render: not laid out yet
    }
    const w = workers[local.logWorker];
    const hidden = w && w.log_hidden ? ` · ${w.log_hidden} TensorFlow start-up lines hidden (TF_CPP_MIN_LOG_LEVEL)` : "";
    logPath.textContent = w && w.log_path ? `last ${lines.length} lines shown${hidden} · full log: ${w.log_path}` : "";
  }

  function clearPending() {
    local.pending = null;
    clearTimeout(local.pendingTimer);
    stopButton.textContent = "Stop";
    restartButton.textContent = "Restart";
  }

  function act(action) {
    if (local.detached) return;
    local.pending = action;
    (action === "stop" ? stopButton : restartButton).textContent = action === "stop" ? "Stopping…" : "Restarting…";
    model.send({ action });
    clearTimeout(local.pendingTimer);
    local.pendingTimer = setTimeout(() => {
      clearPending();
      renderHeader();
      if (!local.detached) notice.textContent = `No answer from the kernel to ${action}: it may be gone or restarted.`;
    }, BUTTON_PENDING_MS);
    renderHeader();
  }

  let lastStatus; // undefined: the first render counts as a change (a re-rendered failed run opens its log too)
  function onCluster() {
    local.receivedAt = Date.now();
    const status = cluster().status;
    if (status !== lastStatus) {
      if (status === "failed") {
        // open the log of the worker that failed (the user can switch tabs afterwards)
        const failed = (cluster().workers || []).findIndex((w) => w.status === "failed");
        if (failed >= 0) local.logWorker = failed;
      }
      lastStatus = status;
      clearPending();
    }
    renderHeader();
    renderCards();
    renderChart(); // worker names/roles feed the legend
    renderLogs();
  }

  // Follow the log's end unless the reader scrolled up to look at something.
  logPre.addEventListener("scroll", () => {
    local.follow = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
  });
  stopButton.addEventListener("click", () => act("stop"));
  restartButton.addEventListener("click", () => act("restart"));
  metricSelect.addEventListener("change", () => {
    local.metric = metricSelect.value;
    renderChart();
  });
  scopeSelect.addEventListener("change", () => {
    local.scope = scopeSelect.value;
    renderChart();
  });

  model.on("change:cluster", onCluster);
  model.on("change:series", renderChart);
  model.on("change:logs", renderLogs);
  model.on("change:logs", renderError);
  model.on("change:notice", renderHeader);
  // The kernel restarted or died: the widget manager marks the comm dead ("comm_live_update", on a restart), and
  // the kernel connection reports its status. Either way no update or button click reaches a kernel any more.
  const onCommLive = () => detach("The kernel restarted");
  model.on("comm_live_update", onCommLive);
  const kernel = model.widget_manager && model.widget_manager.kernel;
  const onKernelStatus = (_, status) => {
    if (DEAD_KERNEL_STATES.has(status)) detach(status === "dead" ? "The kernel died" : "The kernel restarted");
  };
  if (kernel && kernel.statusChanged && typeof kernel.statusChanged.connect === "function") {
    kernel.statusChanged.connect(onKernelStatus);
    if (DEAD_KERNEL_STATES.has(kernel.status)) onKernelStatus(null, kernel.status);
  }
  const ticker = setInterval(() => {
    if (!DONE.has(cluster().status)) renderHeader();
  }, 1000);
  let chartWidth = 0;
  const resize =
    typeof ResizeObserver === "function"
      ? new ResizeObserver(() => {
          const width = chartPanel.clientWidth;
          if (width !== chartWidth) {
            chartWidth = width;
            renderChart();
          }
        })
      : null;
  if (resize) resize.observe(chartPanel);

  onCluster();
  return () => {
    closed = true;
    clearTimeout(attachTimer);
    clearInterval(ticker);
    clearTimeout(local.pendingTimer);
    if (resize) resize.disconnect();
    model.off("change:cluster", onCluster);
    model.off("change:series", renderChart);
    model.off("change:logs", renderLogs);
    model.off("change:logs", renderError);
    model.off("change:notice", renderHeader);
    model.off("change:session", renderSession);
    model.off("comm_live_update", onCommLive);
    if (kernel && kernel.statusChanged && typeof kernel.statusChanged.disconnect === "function") {
      kernel.statusChanged.disconnect(onKernelStatus);
    }
  };
}

export default { render };
