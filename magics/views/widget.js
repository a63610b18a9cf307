// nbworkers live training widget (anywidget ESM, no build step, no network), the last part: the view.
// State comes from synced traits: cluster (header + cards), logs, series (chart), compact (many workers), notice.
// widget.py joins uPlot and the other parts (ESM_PARTS) in front of this file: one module. render() builds the
// header (widget_header.js), the cards or the compact view (here), the panels (widget_panels.js) and wires them.

const DEAD_KERNEL_STATES = new Set(["restarting", "autorestarting", "dead"]);

function render({ model, el }) {
  const root = h("div", { class: "nbw" });
  el.append(root);
  const cards = h("div", { class: "nbw-cards" });
  const compactBox = h("div", { class: "nbw-compact" }); // many workers: overview, heat strip, rows
  // what the parts share: the model, this view's own state and the calls one part makes into another
  const view = {
    model,
    root,
    id: nextViewId(), // names the view in the tab title's registry: unique on the page
    closed: false,
    local: {
      follow: true, metric: null, scope: "all", logWorker: 0, receivedAt: Date.now(), pending: null, pendingTimer: null,
      kernelGone: "", attached: "", attachedStatus: "", attachedError: "", attachedDetached: false,  // kernelGone: why this view no longer hears from its kernel; attached: the run's state then
      confirming: false, confirmTimer: null, // a session's Restart waits for a second click (restart_confirm trait)
      picked: null, // compact view: the worker picked in the heat strip, the rows or the log picker
    },
    cluster: () => model.get("cluster") || {},
    compactState() {
      const data = model.get("compact");
      return data && data.order ? data : null;
    },
    chief(workers) {
      const data = view.compactState();
      return data ? data.chief : chiefIndex(workers);
    },
    renderCards,
    pick,
  };
  const local = view.local;
  const head = headerPart(view);
  const panels = panelsPart(view);
  root.append(...head.nodes, cards, compactBox, panels.node);

  function renderCards() {
    const workers = (view.cluster().workers || []).map(goneCard);
    const data = view.compactState();
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
    const data = view.compactState();
    if (data && !(data.logs_of || []).includes(index) && !local.kernelGone) model.send({ action: "log", worker: index });
    renderCards();
    panels.renderLogs();
  }

  // Its kernel gone, a card no longer hears from its worker: one that had not ended says "stopping" ("detached" for a
  // --detach run, which goes on: kernelGoneStatus in widget_header.js), not "running",
  // then the run's end as the server sees it (e.g. "lost": its processes are gone).
  function goneCard(w) {
    if (!local.kernelGone || DONE.has(w.status)) return w;
    const status = kernelGoneStatus(!!view.cluster().detached || local.attachedDetached, local.attachedStatus);
    return { ...w, status, detail: "" };
  }

  let lastStatus; // undefined: the first render counts as a change (a re-rendered failed run opens its log too)
  function onCluster() {
    local.receivedAt = Date.now();
    const status = view.cluster().status;
    if (status !== lastStatus) {
      if (status === "failed") {
        // open the log of the worker that failed (the user can switch tabs afterwards)
        const failed = (view.cluster().workers || []).findIndex((w) => w.status === "failed");
        if (failed >= 0) local.logWorker = failed;
      }
      lastStatus = status;
      head.clearPending();
    }
    head.renderHeader();
    renderCards();
    panels.renderChart(); // worker names/roles feed the legend
    panels.renderLogs();
    panels.renderPanels();
  }

  model.on("change:cluster", onCluster);
  model.on("change:compact", onCluster);
  // The kernel restarted or died: the widget manager marks the comm dead ("comm_live_update", on a restart), and
  // the kernel connection reports its status. Either way no update or button click reaches a kernel any more.
  const onCommLive = () => head.kernelGone("The kernel restarted");
  model.on("comm_live_update", onCommLive);
  const kernel = model.widget_manager && model.widget_manager.kernel;
  const onKernelStatus = (_, status) => {
    if (DEAD_KERNEL_STATES.has(status)) head.kernelGone(status === "dead" ? "The kernel died" : "The kernel restarted");
  };
  if (kernel && kernel.statusChanged && typeof kernel.statusChanged.connect === "function") {
    kernel.statusChanged.connect(onKernelStatus);
    if (DEAD_KERNEL_STATES.has(kernel.status)) onKernelStatus(null, kernel.status);
  }
  const ticker = setInterval(() => {
    if (!DONE.has(view.cluster().status)) head.renderHeader();
  }, 1000);

  onCluster();
  return () => {
    view.closed = true;
    clearInterval(ticker);
    head.dispose();
    panels.dispose();
    model.off("change:cluster", onCluster);
    model.off("change:compact", onCluster);
    model.off("comm_live_update", onCommLive);
    if (kernel && kernel.statusChanged && typeof kernel.statusChanged.disconnect === "function") {
      kernel.statusChanged.disconnect(onKernelStatus);
    }
  };
}

export default { render };
