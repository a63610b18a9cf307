// nbworkers widget: the view's header (title, status, Stop/Restart, notice), its session line and error box, and
// what it does when its kernel restarts or dies (kernelGone). Joined after widget_title.js, before widget.js.

const BUTTON_PENDING_MS = 8000;
const CONFIRM_MS = 4000; // a session's Restart: how long the "Confirm restart (state of cells 1-N is lost)" step lasts
const ATTACH_POLL_MS = 2000; // its kernel gone: how often the run's state is read from the server extension ...
const ATTACH_POLLS = 30; // ... and how many times, until it says the run ended

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

function describeRestart(r) {
  const sized = r.workers ? `, ${r.workers[1] < r.workers[0] ? "shrank" : "grew"} from ${r.workers[0]} to ${r.workers[1]} workers` : "";
  return `${r.kind || "restart"} (${r.cause || ""})${sized}, ${resumeText(r.resumed_from)}`;
}

// The run's isolation, from its snapshot (state.json's `isolation`, magics/backends/isolation.py): the header's
// badge, "isolation: namespace" or "isolation: off", why as its tooltip (with Ray's TLS for a Ray run); null for a
// run that recorded none (an older nbworkers).
function isolationBadge(fact) {
  if (!fact || !fact.mode) return null;
  const why = fact.mode === "namespace"
    ? "The run's workers are in a private network namespace: only they reach their TensorFlow ports."
    : `Not isolated: ${fact.reason || "no reason recorded"}.`;
  const tls = fact.ray_tls ? ` Ray's TLS: ${fact.ray_tls}.` : "";
  return { text: `isolation: ${fact.mode}`, title: `${why}${tls}`, mode: fact.mode };
}

// The status a view shows once its kernel restarted or died (it hears from the run no more): how the run ended, once
// the server says it ended; before that a --detach run (`detachedRun`) is "detached" (it goes on without the kernel),
// any other "stopping" (its worker hosts stop it with its kernel): "detached" is the --detach feature's word only.
function kernelGoneStatus(detachedRun, serverStatus) {
  if (DONE.has(serverStatus)) return serverStatus;
  return detachedRun ? "detached" : "stopping";
}

// `text` into `node`, a `command` between backticks as code (the messages' Markdown-style quoting, never shown raw).
function setCodeText(node, text) {
  const parts = String(text || "").split(/`([^`\n]+)`/);
  node.replaceChildren(...parts.map((part, i) => (i % 2 ? h("code", { text: part }) : document.createTextNode(part))));
}

// `view`: the state render() shares with its parts (widget.js). Returns the header's nodes and what the view calls.
function headerPart(view) {
  const { model, local, root } = view;
  const title = h("span", { class: "nbw-title" });
  const headBadge = h("span");
  const meta = h("span", { class: "nbw-meta" });
  const isolation = h("span", { class: "nbw-isolation" });
  const detachedMark = h("span", { class: "nbw-detached-mark", text: "detached",
    title: "Started with --detach: it goes on when this notebook's kernel restarts or dies (%workers attach NAME shows it again)" });
  const notice = h("span", { class: "nbw-notice" });
  const stopButton = h("button", { class: "nbw-button nbw-stop", type: "button", text: "Stop", title: "Stop every worker" });
  const restartButton = h("button", { class: "nbw-button nbw-restart", type: "button", text: "Restart", title: "Restart the whole group" });
  const header = h("div", { class: "nbw-header" }, title, headBadge, meta, isolation, detachedMark, notice, h("span", { class: "nbw-spacer" }), stopButton, restartButton);
  // the error: its short list (what failed, what is kept, what to run), then the traceback once, never scrolled
  const errorText = h("div", { class: "nbw-error-text" });
  const errorTraceback = h("pre", { class: "nbw-traceback" });
  const error = h("div", { class: "nbw-error" }, errorText, errorTraceback);
  // sessions (%%worker --session): one line under the header: session, cell number, its state, what it runs
  const sessionLine = h("div", { class: "nbw-session", style: "font-size:0.85em;opacity:0.8;margin:2px 0 6px" });
  let attachTimer = null;

  function renderSession() {
    const info = model.get("session") || {};
    sessionLine.style.display = info.name ? "" : "none";
    if (!info.name) return;
    sessionLine.dataset.cell = String(info.cell);
    sessionLine.dataset.state = info.state || "";
    const label = info.label || `cell ${info.cell}`; // "restore": a cell nbworkers runs, not the user's cell N
    const running = info.running && info.running !== label ? ` · ${info.running}` : "";
    sessionLine.textContent = `session ${info.name} · ${label} · ${info.state}${running}`;
    // saved state put back at the cell's end, over what its code built (issue 43): said here, not in the log alone
    if (info.restored) sessionLine.append(h("div", { class: "nbw-restored", text: `saved state put back at the end of this cell, over what its code built: ${info.restored}` }));
  }

  function renderHeader() {
    const c = view.cluster();
    const workers = c.workers || [];
    title.textContent = c.name ? `Cluster ${c.name}` : "Cluster";
    if (local.kernelGone) headBadge.replaceChildren(badge(goneStatus(), STATUS_LABELS[goneStatus()]));
    else headBadge.replaceChildren(badge(c.status || "starting", c.status === "stopped" ? "stopped by you" : ""));
    root.dataset.status = c.status || "";
    root.dataset.kernelGone = local.kernelGone ? "1" : "";
    let wall = c.wall_time;
    if (typeof wall === "number" && !DONE.has(c.status) && !local.kernelGone) wall += (Date.now() - local.receivedAt) / 1000;
    const size = c.elastic ? `${workers.length} of ${c.elastic.max} workers (elastic, min ${c.elastic.min})`
      : `${workers.length} worker${workers.length === 1 ? "" : "s"}`;
    const parts = [size, fmtDuration(wall)];
    if (c.backend && c.backend !== "local") parts.push(c.backend);
    if (c.restarts) parts.push(`${c.restarts} restart${c.restarts === 1 ? "" : "s"}`);
    const history = c.restart_history || [];
    if (history.length) parts.push(`last restart: ${describeRestart(history[history.length - 1])}`);
    meta.textContent = parts.join(" · ");
    const iso = isolationBadge(c.isolation);
    isolation.style.display = iso ? "" : "none";
    isolation.textContent = iso ? iso.text : "";
    isolation.title = iso ? iso.title : "";
    isolation.dataset.mode = iso ? iso.mode : "";
    detachedMark.style.display = c.detached && !(local.kernelGone && goneStatus() === "detached") ? "" : "none";
    const done = DONE.has(c.status);
    stopButton.disabled = done || local.pending === "stop" || !!local.kernelGone;
    restartButton.disabled = local.pending === "restart" || !!local.kernelGone; // after a run, Restart runs it again
    const confirm = model.get("restart_confirm") || {}; // sessions only: what a restart loses
    restartButton.title = confirm.title || "Restart the whole group";
    if (local.confirming && !local.pending) restartButton.textContent = confirm.label || "Confirm restart";
    setCodeText(notice, local.kernelGone ? goneText() : model.get("notice") || "");
    setTitleProgress(view.id, local.kernelGone ? null : titleProgress(c, view.chief(workers)), root);
    renderError();
  }

  // ---- a kernel that restarted or died: this view hears from its run no more
  // The name `%workers attach` and the server extension know the run by: a session cell's is its session's.
  function runName() {
    const info = model.get("session") || {};
    return info.name || view.cluster().name || "";
  }

  // One status for a run whose kernel went away (kernelGoneStatus): "stopping", or "detached" for a --detach run,
  // until the server says how the run ended ("stopped", with the same words as the sidebar and `%workers attach`:
  // KERNEL_GONE), then that.
  function goneStatus() {
    return kernelGoneStatus(!!view.cluster().detached || local.attachedDetached, local.attachedStatus);
  }

  function goneText() {
    const name = runName() || "NAME";
    const logs = ` \`%workers attach ${name}\` in a cell shows its state and logs.`;
    if (!local.attached) return `${local.kernelGone}: this view no longer updates.${logs}`; // the server not asked yet
    if (!DONE.has(local.attachedStatus)) {
      const fate = local.attachedDetached ? "the run goes on (--detach)" : "the run stops with it; run the cell again";
      return `${local.kernelGone}: ${fate}, and this view no longer updates.${logs}`;
    }
    const why = local.attachedError || local.attachedStatus;
    return `${why.charAt(0).toUpperCase() + why.slice(1)}.${logs}`; // e.g. KERNEL_GONE: the why, said once
  }

  function kernelGone(reason) {
    if (local.kernelGone) return;
    local.kernelGone = reason;
    clearPending();
    renderHeader();
    view.renderCards();
    lookUpRun();
  }

  // What `%workers attach NAME` would show, from the server extension (it reads the run's state file), read
  // again every ATTACH_POLL_MS until the run ended there (the old kernel's worker hosts stop its workers).
  async function lookUpRun(polls = ATTACH_POLLS) {
    const name = runName();
    if (!name || typeof fetch !== "function" || view.closed) return;
    let ended = false;
    try {
      const reply = await fetch(`${baseUrl()}nbworkers/api/clusters/${encodeURIComponent(name)}`, { credentials: "same-origin" });
      if (!reply.ok) return; // no server extension, or no such run: the text without its state says enough
      const data = await reply.json();
      ended = DONE.has(data.status);
      local.attached = `${data.status}${data.error ? ` (${data.error})` : ""}`;
      local.attachedError = data.status === "failed" ? "" : data.error || ""; // a failure's error is in the box
      local.attachedDetached = !!data.detached; // a --detach run outlives its kernel
      local.attachedStatus = data.status || "";
      renderHeader();
      view.renderCards();
    } catch (e) {
      return;
    }
    if (!ended && polls > 1) attachTimer = setTimeout(() => lookUpRun(polls - 1), ATTACH_POLL_MS);
  }

  function renderError() {
    const c = view.cluster();
    const logs = model.get("logs") || [];
    const causes = c.restart_causes || [];
    const parts = [c.error || ""];
    if (c.status === "restarting" && causes.length) parts.push(`restarting: ${causes[causes.length - 1]}`);
    const at = (c.error || "").indexOf(TRACEBACK_START);
    let traceback = at >= 0 ? c.error.slice(at) : ""; // a session cell's error carries its worker's traceback
    if (at >= 0) parts[0] = c.error.slice(0, at).trimEnd();
    (c.workers || []).forEach((w, i) => {
      if (w.status !== "failed" || traceback) return; // once: the log's tail only when the error has none
      const tail = tracebackTail(logs[i] || []);
      if (tail.length) traceback = `${workerName(w)}, last lines of its log:\n${tail.join("\n")}`;
    });
    const text = parts.filter(Boolean).join("\n");
    setCodeText(errorText, text);
    errorText.style.display = text ? "" : "none";
    errorTraceback.textContent = traceback.trimEnd();
    errorTraceback.style.display = traceback ? "" : "none";
    error.style.display = text || traceback ? "" : "none";
  }

  // ---- Stop and Restart
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
    if (local.kernelGone) return;
    local.pending = action;
    (action === "stop" ? stopButton : restartButton).textContent = action === "stop" ? "Stopping…" : "Restarting…";
    model.send({ action });
    clearTimeout(local.pendingTimer);
    local.pendingTimer = setTimeout(() => {
      clearPending();
      renderHeader();
      if (!local.kernelGone) notice.textContent = `No answer from the kernel to ${action}: it may be gone or restarted.`;
    }, BUTTON_PENDING_MS);
    renderHeader();
  }

  stopButton.addEventListener("click", () => act("stop"));
  restartButton.addEventListener("click", clickRestart);
  renderSession();
  model.on("change:session", renderSession);
  model.on("change:notice", onNotice);
  model.on("change:restart_confirm", renderHeader);
  model.on("change:logs", renderError);

  function dispose() {
    clearTimeout(attachTimer);
    clearTimeout(local.pendingTimer);
    clearTimeout(local.confirmTimer);
    setTitleProgress(view.id, null);
    model.off("change:session", renderSession);
    model.off("change:notice", onNotice);
    model.off("change:restart_confirm", renderHeader);
    model.off("change:logs", renderError);
  }

  return { nodes: [header, sessionLine, error], renderHeader, kernelGone, clearPending, dispose };
}
