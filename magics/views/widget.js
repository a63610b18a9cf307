// nbworkers live training widget (anywidget ESM, no build step, no network), part 3 of 3: the view.
// State comes from synced traits: cluster (header + cards), logs, series (chart), compact (many workers), notice.
// widget.py puts uPlot, widget_cards.js and widget_chart.js in front of this file: one module.

const BUTTON_PENDING_MS = 8000;
const CONFIRM_MS = 4000; // a session's Restart: how long the "Confirm restart (state of cells 1-N is lost)" step lasts
const DEAD_KERNEL_STATES = new Set(["restarting", "autorestarting", "dead"]);
const ATTACH_POLL_MS = 2000; // detached: how often the run's state is read from the server extension ...
const ATTACH_POLLS = 30; // ... and how many times, until it says the run ended
let viewCount = 0; // names each view in the tab title's registry

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
  const compactBox = h("div", { class: "nbw-compact" }); // many workers: overview, heat strip, rows

  const metricSelect = h("select", { class: "nbw-metric", title: "Metric to plot" });
  const scopeSelect = h("select", { class: "nbw-scope", title: "Workers to plot" });
  scopeSelect.append(h("option", { value: "all", text: "all workers" }), h("option", { value: "chief", text: "chief only" }));
  const chartBox = h("div", { class: "nbw-chart", role: "img", "aria-label": "metrics chart" });
  const chartEmpty = h("div", { class: "nbw-chart-empty" });
  const legend = h("div", { class: "nbw-legend" });
  const chartPanel = h(
    "div",
    { class: "nbw-panel nbw-chart-panel" },
    h("div", { class: "nbw-controls" }, h("span", { class: "nbw-panel-title", text: "Metrics" }), h("label", {}, "metric ", metricSelect), h("label", {}, "show ", scopeSelect)),
    h("div", { class: "nbw-chart-box" }, chartBox, chartEmpty),
    legend,
  );

  const tabs = h("div", { class: "nbw-tabs" });
  const logPicker = h("select", { class: "nbw-log-picker", title: "Show any worker's log" });
  const logPath = h("div", { class: "nbw-logpath" });
  const logPre = h("pre", { class: "nbw-log", tabindex: "0" });
  const logPanel = h("div", { class: "nbw-panel nbw-log-panel" }, h("div", { class: "nbw-controls" }, h("span", { class: "nbw-panel-title", text: "Log" }), tabs, logPicker), logPre, logPath);

  // sessions (%%worker --session): one line under the header: session, cell number, its state, what it runs
  const sessionLine = h("div", { class: "nbw-session", style: "font-size:0.85em;opacity:0.8;margin:2px 0 6px" });
  const panels = h("div", { class: "nbw-panels" }, chartPanel, logPanel);
  root.append(header, sessionLine, error, cards, compactBox, panels);
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
  let plot = null; // the uPlot chart, once there is something to draw
  const local = {
    follow: true, metric: null, scope: "all", logWorker: 0, receivedAt: Date.now(), pending: null, pendingTimer: null,
    detached: "", attached: "", attachedStatus: "",  // detached: why this view no longer hears from its kernel; attached: the run's state then
    confirming: false, confirmTimer: null, // a session's Restart waits for a second click (restart_confirm trait)
    picked: null, // compact view: the worker picked in the heat strip, the rows or the log picker
  };
  const viewId = `nbw-view-${++viewCount}`;

  function compactState() {
    const data = model.get("compact");
    return data && data.order ? data : null;
  }

  function chief(workers) {
    const data = compactState();
    return data ? data.chief : chiefIndex(workers);
  }

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
    const size = c.elastic ? `${workers.length} of ${c.elastic.max} workers (elastic, min ${c.elastic.min})`
      : `${workers.length} worker${workers.length === 1 ? "" : "s"}`;
    const parts = [size, fmtDuration(wall)];
    if (c.backend && c.backend !== "local") parts.push(c.backend);
    if (c.restarts) parts.push(`${c.restarts} restart${c.restarts === 1 ? "" : "s"}`);
    const history = c.restart_history || [];
    if (history.length) parts.push(`last restart: ${describeRestart(history[history.length - 1])}`);
    meta.textContent = parts.join(" · ");
    const done = DONE.has(c.status);
    stopButton.disabled = done || local.pending === "stop" || !!local.detached;
    restartButton.disabled = local.pending === "restart" || !!local.detached; // after a run, Restart runs it again
    const confirm = model.get("restart_confirm") || {}; // sessions only: what a restart loses
    restartButton.title = confirm.title || "Restart the whole group";
    if (local.confirming && !local.pending) restartButton.textContent = confirm.label || "Confirm restart";
    notice.textContent = local.detached ? detachedText() : model.get("notice") || "";
    setTitleProgress(viewId, local.detached ? null : titleProgress(c, chief(workers)));
    renderError();
  }

  function describeRestart(r) {
    const sized = r.workers ? `, ${r.workers[1] < r.workers[0] ? "shrank" : "grew"} from ${r.workers[0]} to ${r.workers[1]} workers` : "";
    return `${r.kind || "restart"} (${r.cause || ""})${sized}, ${resumeText(r.resumed_from)}`;
  }

  // ---- a kernel that restarted or died: this view is detached from its run
  // The name `%workers attach` and the server extension know the run by: a session cell's is its session's.
  function runName() {
    const info = model.get("session") || {};
    return info.name || cluster().name || "";
  }

  function detachedText() {
    const name = runName() || "NAME";
    const state = local.attached ? ` The server sees the run as: ${local.attached}.` : "";
    return `${local.detached}: this view no longer updates.${state} Run \`%workers attach ${name}\` in a cell for the run's state and logs.`;
  }

  function detach(reason) {
    if (local.detached) return;
    local.detached = reason;
    clearPending();
    renderHeader();
    renderCards();
    lookUpRun();
  }

  // What `%workers attach NAME` would show, from the server extension (it reads the run's state file), read
  // again every ATTACH_POLL_MS until the run ended there (the old kernel's worker hosts stop its workers).
  async function lookUpRun(polls = ATTACH_POLLS) {
    const name = runName();
    if (!name || typeof fetch !== "function" || closed) return;
    let ended = false;
    try {
      const reply = await fetch(`${baseUrl()}nbworkers/api/clusters/${encodeURIComponent(name)}`, { credentials: "same-origin" });
      if (!reply.ok) return; // no server extension, or no such run: the text without its state says enough
      const data = await reply.json();
      ended = DONE.has(data.status);
      local.attached = `${data.status}${data.error ? ` (${data.error})` : ""}`;
      local.attachedStatus = data.status || "";
      renderHeader();
      renderCards();
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
    const workers = (cluster().workers || []).map(detachedCard);
    const data = compactState();
    root.dataset.compact = data ? "1" : "";
    cards.style.display = data ? "none" : "";
    compactBox.style.display = data ? "" : "none";
    if (!data) {
      cards.replaceChildren(...workers.map(renderCard));
      compactBox.replaceChildren();
      return;
    }
    cards.replaceChildren();
    const flagged = new Set(data.flagged || []);
    const rowsBox = h("div", { class: "nbw-rows-box" }, renderRows(workers, data, flagged, local.picked, pick));
    const scroll = compactBox.querySelector(".nbw-rows-box");
    compactBox.replaceChildren(renderOverview(workers, data), renderHeat(workers, flagged, local.picked, pick), rowsBox);
    if (scroll) rowsBox.scrollTop = scroll.scrollTop; // the reader's place in the rows survives an update
  }

  // Compact view: show worker `index`'s log (the kernel sends it from now on) and mark it in the strip and rows.
  function pick(index) {
    local.picked = index;
    local.logWorker = index;
    local.follow = true;
    const data = compactState();
    if (data && !(data.logs_of || []).includes(index) && !local.detached) model.send({ action: "log", worker: index });
    renderCards();
    renderLogs();
  }

  // Detached, a card no longer hears from its worker: one that had not ended says "detached" (not "running"),
  // then the run's end as the server sees it (e.g. "lost": its processes are gone).
  function detachedCard(w) {
    if (!local.detached || DONE.has(w.status)) return w;
    const status = DONE.has(local.attachedStatus) ? local.attachedStatus : "detached";
    return { ...w, status, detail: "" };
  }

  // A session cell's panels appear when there is something in them: a 0.1 s cell is its header and cards. A
  // blocking cell's lines are written into the notebook cell itself (echoed): no second copy in a log panel.
  function renderPanels() {
    const info = model.get("session") || {};
    const session = info.name;
    const hasChart = (model.get("series") || []).some((e) => e && (e.x || []).length && Object.keys(e.metrics || {}).length);
    const hasLog = !info.echoed && (model.get("logs") || []).some((lines) => lines && lines.length);
    chartPanel.style.display = !session || hasChart ? "" : "none";
    logPanel.style.display = !session || hasLog ? "" : "none";
    panels.style.display = !session || hasChart || hasLog ? "" : "none";
  }

  function renderChart() {
    const c = cluster();
    const workers = c.workers || [];
    const data = compactState();
    if (data) {
      const names = Object.keys((data.chart && data.chart.band) || {}).sort();
      pickMetric(names);
      scopeSelect.parentNode.style.display = "none"; // the band is every worker; the chief is the line
      plot = drawBandChart(chartBox, chartEmpty, legend, plot, data.chart, local.metric, data.outliers, data.chief, workers);
      return;
    }
    scopeSelect.parentNode.style.display = "";
    const series = model.get("series") || [];
    const names = [...new Set(series.flatMap((e) => Object.keys(e.metrics || {})))].sort();
    pickMetric(names);
    const only = local.scope === "chief" ? chiefIndex(workers) : null;
    plot = drawChart(chartBox, chartEmpty, legend, plot, series, local.metric, only, workers);
  }

  function pickMetric(names) {
    if (!local.metric || !names.includes(local.metric)) {
      local.metric = names.includes("loss") ? "loss" : names[0] || null;
    }
    const options = names.map((n) => h("option", { value: n, text: n }));
    metricSelect.replaceChildren(...options);
    if (local.metric) metricSelect.value = local.metric;
    metricSelect.disabled = !names.length;
  }

  function renderLogs() {
    const workers = cluster().workers || [];
    const logs = model.get("logs") || [];
    if (local.logWorker >= workers.length) local.logWorker = 0;
    const data = compactState();
    // compact: tabs for the chief and the flagged workers only; the picker reaches every worker
    const tabWorkers = data ? [...new Set([data.chief, ...(data.flagged || []).slice(0, 8)])] : workers.map((_, i) => i);
    logPicker.style.display = data ? "" : "none";
    if (data) renderPicker(workers, data);
    tabs.replaceChildren(
      ...tabWorkers.filter((i) => workers[i]).map((i) => {
        const w = workers[i];
        const text = `${data && (data.flagged || []).includes(i) ? "⚠ " : ""}${workerName(w)}`;
        const tab = h("button", { type: "button", class: `nbw-tab${i === local.logWorker ? " nbw-tab-active" : ""}`, text, "data-index": i });
        tab.addEventListener("click", () => {
          if (data) return pick(i);
          local.logWorker = i;
          local.follow = true;
          renderLogs();
        });
        return tab;
      }),
    );
    const lines = logs[local.logWorker] || [];
    const coming = data && !(data.logs_of || []).includes(local.logWorker);
    logPre.textContent = lines.length ? lines.join("\n") : coming ? "(asking the kernel for this worker's log…)" : "(no output yet)";
    if (local.follow) {
      logPre.scrollTop = logPre.scrollHeight;
      requestAnimationFrame(() => (logPre.scrollTop = logPre.scrollHeight)); // first render: not laid out yet
    }
    const w = workers[local.logWorker];
    const hidden = w && w.log_hidden ? ` · ${w.log_hidden} TensorFlow start-up lines hidden (TF_CPP_MIN_LOG_LEVEL)` : "";
    logPath.textContent = w && w.log_path ? `last ${lines.length} lines shown${hidden} · full log: ${w.log_path}` : "";
  }

  function renderPicker(workers, data) {
    const flagged = new Set(data.flagged || []);
    const label = (w) => `${flagged.has(w.index) ? "⚠ " : ""}${workerName(w)} · ${STATUS_LABELS[w.status] || w.status}`;
    const labels = workers.map(label);
    if (logPicker.dataset.labels !== labels.join("\n")) { // rebuilt only when a label changed: an open list stays open
      logPicker.dataset.labels = labels.join("\n");
      const options = [h("option", { value: "", text: `any of ${workers.length} workers…` })];
      workers.forEach((w, i) => options.push(h("option", { value: String(w.index), text: labels[i] })));
      logPicker.replaceChildren(...options);
    }
    logPicker.value = String(local.logWorker);
  }

  function clearPending() {
    local.pending = null;
    clearTimeout(local.pendingTimer);
    stopButton.textContent = "Stop";
    restartButton.textContent = "Restart";
  }

  // Restart of a session wipes its cells' state: the first click only turns the button into its confirm step.
  function clickRestart() {
    const confirm = model.get("restart_confirm") || {};
    if (!confirm.label || local.confirming) {
      endConfirm();
      act("restart");
      return;
    }
    local.confirming = true;
    restartButton.dataset.confirming = "1";
    clearTimeout(local.confirmTimer);
    local.confirmTimer = setTimeout(() => {
      endConfirm();
      renderHeader();
    }, CONFIRM_MS);
    renderHeader();
  }

  function endConfirm() {
    local.confirming = false;
    clearTimeout(local.confirmTimer);
    restartButton.dataset.confirming = "";
    if (!local.pending) restartButton.textContent = "Restart";
  }

  // The kernel's notice answers a click: "…" while it works on it (the no-answer timer stops), else it is done.
  function onNotice() {
    const text = model.get("notice") || "";
    if (local.pending && text) {
      clearTimeout(local.pendingTimer);
      if (!text.endsWith("…")) clearPending();
    }
    renderHeader();
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
    renderPanels();
  }

  // Follow the log's end unless the reader scrolled up to look at something.
  logPre.addEventListener("scroll", () => {
    local.follow = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
  });
  stopButton.addEventListener("click", () => act("stop"));
  restartButton.addEventListener("click", clickRestart);
  metricSelect.addEventListener("change", () => {
    local.metric = metricSelect.value;
    renderChart();
  });
  logPicker.addEventListener("change", () => {
    if (logPicker.value !== "") pick(Number(logPicker.value));
  });
  scopeSelect.addEventListener("change", () => {
    local.scope = scopeSelect.value;
    renderChart();
  });

  model.on("change:cluster", onCluster);
  model.on("change:series", renderChart);
  model.on("change:compact", onCluster);
  model.on("change:series", renderPanels);
  model.on("change:logs", renderLogs);
  model.on("change:logs", renderPanels);
  model.on("change:session", renderPanels);
  model.on("change:logs", renderError);
  model.on("change:notice", onNotice);
  model.on("change:restart_confirm", renderHeader);
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
    clearTimeout(local.confirmTimer);
    if (resize) resize.disconnect();
    if (plot) plot.destroy();
    model.off("change:cluster", onCluster);
    model.off("change:series", renderChart);
    model.off("change:compact", onCluster);
    setTitleProgress(viewId, null);
    model.off("change:logs", renderLogs);
    model.off("change:series", renderPanels);
    model.off("change:logs", renderPanels);
    model.off("change:session", renderPanels);
    model.off("change:logs", renderError);
    model.off("change:notice", onNotice);
    model.off("change:restart_confirm", renderHeader);
    model.off("change:session", renderSession);
    model.off("comm_live_update", onCommLive);
    if (kernel && kernel.statusChanged && typeof kernel.statusChanged.disconnect === "function") {
      kernel.statusChanged.disconnect(onKernelStatus);
    }
  };
}

export default { render };
