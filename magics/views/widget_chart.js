// nbworkers widget, part 2 of 3: the metrics chart (after widget_cards.js, before widget.js).

// Drawn by uPlot (magics/vendor-uplot, MIT): widget.py puts its script in front of this module, which
// declares `uPlot` here. The kernel sends each worker's history already bounded (widget.py downsample()).

const CHART_HEIGHT = 220;
const STEP_INCRS = [1, 2, 5].flatMap((m) => Array.from({ length: 13 }, (_, e) => m * 10 ** e)).sort((a, b) => a - b);

// The lines to draw: per worker, its finite points, split where the step goes backwards (a restart) so no
// line is drawn back across the chart; each piece becomes a uPlot series in the worker's colour.
function chartLines(series, metric, only) {
  const lines = [];
  for (const entry of series || []) {
    if (only !== null && entry.index !== only) continue;
    const ys = (entry.metrics || {})[metric] || [];
    const segments = [];
    let count = 0;
    let last = null;
    for (let i = 0; i < entry.x.length; i++) {
      const [x, y] = [entry.x[i], ys[i]];
      if (typeof y !== "number" || !isFinite(y)) continue;
      if (!segments.length || x < last[0]) segments.push(new Map());
      segments[segments.length - 1].set(x, y);
      last = [x, y];
      count++;
    }
    lines.push({ index: entry.index, segments, count, last });
  }
  return lines;
}

// uPlot's data: one shared, sorted x (steps) and per segment its y at each x (null where it has none).
function chartData(lines) {
  const xs = [...new Set(lines.flatMap((l) => l.segments.flatMap((seg) => [...seg.keys()])))].sort((a, b) => a - b);
  const ys = lines.flatMap((l) => l.segments.map((seg) => xs.map((x) => (seg.has(x) ? seg.get(x) : null))));
  return [xs, ...ys];
}

function cssColor(node, name, fallback) {
  return getComputedStyle(node).getPropertyValue(name).trim() || fallback;
}

function chartOptions(node, lines, width) {
  const muted = cssColor(node, "--nbw-muted", "#59636e");
  const grid = { stroke: cssColor(node, "--nbw-border", "#d8dee4"), width: 1, dash: [2, 3] };
  const font = `11px ${cssColor(node, "font-family", "sans-serif")}`;
  const values = (u, splits) => splits.map(fmtNumber);
  const series = [{}];
  for (const line of lines) {
    const color = COLORS[line.index % COLORS.length];
    line.segments.forEach((_, k) => {
      const isLast = k === line.segments.length - 1;
      series.push({
        label: `#${line.index}`,
        stroke: color,
        width: 1.8,
        spanGaps: true, // other workers' steps are gaps in this one's column: join across them
        // the newest point of each worker gets a dot, as the legend's value
        points: { show: false, size: 6, fill: color, stroke: color, filter: isLast ? (u, i) => lastIndex(u.data[i]) : null },
      });
    });
  }
  return {
    width,
    height: CHART_HEIGHT,
    legend: { show: false },
    cursor: { show: false, drag: { x: false, y: false } },
    select: { show: false },
    scales: { x: { time: false } },
    axes: [
      { stroke: muted, font, labelFont: font, grid, ticks: { show: false }, incrs: STEP_INCRS, values, label: "step", size: 24, labelSize: 14, labelGap: 0 },
      { stroke: muted, font, grid, ticks: { show: false }, values, size: 56 },
    ],
    series,
  };
}

function lastIndex(ys) {
  for (let i = ys.length - 1; i >= 0; i--) if (ys[i] !== null) return [i];
  return null;
}

// Draw `metric` into `box` (`only`: one worker's index, or null for all). Returns the uPlot in use: reused
// (new data, new width) while the set of lines stays the same, rebuilt otherwise.
function drawChart(box, empty, legend, plot, series, metric, only, workers) {
  const width = Math.max(240, Math.floor(box.clientWidth || 600));
  const lines = chartLines(series, metric, only).filter((l) => l.count);
  const points = lines.reduce((n, l) => n + l.count, 0);
  box.dataset.points = String(points);
  box.dataset.lines = String(lines.length);
  box.dataset.segments = String(lines.reduce((n, l) => n + l.segments.length, 0));
  legend.replaceChildren();
  if (!points) {
    if (plot) plot.destroy();
    empty.textContent = metric ? `no ${metric} values yet` : "no metrics reported yet";
    empty.style.display = "";
    return null;
  }
  empty.style.display = "none";
  const shape = lines.map((l) => `${l.index}:${l.segments.length}`).join(",");
  if (plot && plot.nbwShape === shape) {
    if (plot.width !== width) plot.setSize({ width, height: CHART_HEIGHT });
    plot.setData(chartData(lines));
  } else {
    if (plot) plot.destroy();
    plot = new uPlot(chartOptions(box, lines, width), chartData(lines), box);
    plot.nbwShape = shape;
  }
  for (const line of lines) {
    const [lx, ly] = line.last;
    const w = workers.find((x) => x.index === line.index);
    const item = h("span", { class: "nbw-legend-item", "data-worker": line.index });
    const swatch = h("span", { class: "nbw-swatch" });
    swatch.style.background = COLORS[line.index % COLORS.length];
    item.append(swatch, `${w ? workerName(w) : "#" + line.index}: ${fmtNumber(ly)} @ ${fmtNumber(lx)}`);
    legend.append(item);
  }
  return plot;
}
