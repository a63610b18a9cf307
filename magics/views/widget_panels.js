// nbworkers widget: the view's two panels, the metrics chart and the workers' logs (tabs, and in the compact view a
// picker that reaches any worker). Joined after widget_header.js, before widget.js.

// `view`: the state render() shares with its parts (widget.js). Returns the panels' node and what the view calls.
function panelsPart(view) {
  const { model, local } = view;
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
  const panels = h("div", { class: "nbw-panels" }, chartPanel, logPanel);
  let plot = null; // the uPlot chart, once there is something to draw

  // A session cell's panels appear when there is something in them: a 0.1 s cell is its header and cards. A
  // blocking cell's lines are written into the notebook cell itself (echoed): no second copy in a log panel.
  function renderPanels() {
    const info = model.get("session") || {};
    const session = info.name;
    const compact = view.compactState();
    const hasChart = compact
      ? Object.keys((compact.chart && compact.chart.band) || {}).length > 0
      : (model.get("series") || []).some((e) => e && (e.x || []).length && Object.keys(e.metrics || {}).length);
    const hasLog = !info.echoed && (model.get("logs") || []).some((lines) => lines && lines.length);
    // a session cell, or the compact view of many workers, without metrics: no empty chart beside the log
    chartPanel.style.display = (!session && !compact) || hasChart ? "" : "none";
    logPanel.style.display = !session || hasLog ? "" : "none";
    panels.style.display = !session || hasChart || hasLog ? "" : "none";
  }

  function renderChart() {
    const workers = view.cluster().workers || [];
    const data = view.compactState();
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
    const workers = view.cluster().workers || [];
    const logs = model.get("logs") || [];
    if (local.logWorker >= workers.length) local.logWorker = 0;
    const data = view.compactState();
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
          if (data) return view.pick(i);
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
    const count = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;
    const hidden = w && w.log_hidden ? ` · ${count(w.log_hidden, "TensorFlow start-up line")} hidden (TF_CPP_MIN_LOG_LEVEL)` : "";
    logPath.textContent = w && w.log_path ? `last ${count(lines.length, "line")} shown${hidden} · full log: ${w.log_path}` : "";
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

  // Follow the log's end unless the reader scrolled up to look at something.
  logPre.addEventListener("scroll", () => {
    local.follow = logPre.scrollHeight - logPre.scrollTop - logPre.clientHeight < 24;
  });
  metricSelect.addEventListener("change", () => {
    local.metric = metricSelect.value;
    renderChart();
  });
  logPicker.addEventListener("change", () => {
    if (logPicker.value !== "") view.pick(Number(logPicker.value));
  });
  scopeSelect.addEventListener("change", () => {
    local.scope = scopeSelect.value;
    renderChart();
  });
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
  model.on("change:series", renderChart);
  model.on("change:series", renderPanels);
  model.on("change:logs", renderLogs);
  model.on("change:logs", renderPanels);
  model.on("change:session", renderPanels);

  function dispose() {
    if (resize) resize.disconnect();
    if (plot) plot.destroy();
    model.off("change:series", renderChart);
    model.off("change:series", renderPanels);
    model.off("change:logs", renderLogs);
    model.off("change:logs", renderPanels);
    model.off("change:session", renderPanels);
  }

  return { node: panels, renderChart, renderLogs, renderPanels, dispose };
}
