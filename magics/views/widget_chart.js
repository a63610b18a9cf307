// nbworkers widget: the metrics chart, and the compact view's band chart (after widget_cards.js, before widget_title.js).

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

// ------------------------------------------------------------------------------------ compact chart (many workers)
// The kernel sends one step grid for all (compact.py chart_payload): per metric the min-max band of every worker,
// and the lines of the chief and of the outliers. Drawn: the band (filled), the chief's line, each outlier of this
// metric as a line of its own colour.

const BAND_FILL = "rgba(37, 99, 235, 0.16)";
const BAND_EDGE = "rgba(37, 99, 235, 0.35)";
const OUTLIER_COLORS = ["#dc2626", "#ea580c", "#9333ea", "#be185d", "#65a30d", "#0891b2"];

function bandOptions(node, width, outlierIndices, chief) {
  const options = chartOptions(node, [], width);
  const edge = { stroke: BAND_EDGE, width: 1, spanGaps: true, points: { show: false } };
  options.series.push({ label: "min", ...edge }, { label: "max", ...edge });
  options.bands = [{ series: [2, 1], fill: BAND_FILL }];
  options.series.push({ label: `#${chief}`, stroke: COLORS[0], width: 2, spanGaps: true, points: { show: false } });
  outlierIndices.forEach((index, k) => {
    options.series.push({ label: `#${index}`, stroke: OUTLIER_COLORS[k % OUTLIER_COLORS.length], width: 1.6, spanGaps: true, points: { show: false } });
  });
  return options;
}

function lastValue(xs, ys) {
  for (let i = ys.length - 1; i >= 0; i--) if (typeof ys[i] === "number") return [xs[i], ys[i]];
  return null;
}

// Draw `metric` of the compact chart into `box`; returns the uPlot in use (rebuilt when the lines drawn change).
function drawBandChart(box, empty, legend, plot, chart, metric, outliers, chief, workers) {
  const width = Math.max(240, Math.floor(box.clientWidth || 600));
  const xs = (chart && chart.x) || [];
  const band = ((chart && chart.band) || {})[metric];
  const lineOf = new Map(((chart && chart.lines) || []).map((l) => [l.index, (l.metrics || {})[metric] || []]));
  const outlierIndices = ((outliers || {})[metric] || []).filter((i) => i !== chief && lineOf.has(i));
  const chiefYs = lineOf.get(chief) || xs.map(() => null);
  const series = [band ? band[0] : [], band ? band[1] : [], chiefYs, ...outlierIndices.map((i) => lineOf.get(i))];
  const points = series.reduce((n, ys) => n + ys.filter((y) => typeof y === "number").length, 0);
  box.dataset.points = String(points);
  box.dataset.lines = String(1 + outlierIndices.length);
  box.dataset.band = band ? "1" : "";
  box.dataset.outliers = outlierIndices.join(",");
  legend.replaceChildren();
  if (!xs.length || !points) {
    if (plot) plot.destroy();
    empty.textContent = metric ? `no ${metric} values yet` : "no metrics reported yet";
    empty.style.display = "";
    return null;
  }
  empty.style.display = "none";
  const data = [xs, ...series.map((ys) => xs.map((_, i) => (typeof ys[i] === "number" ? ys[i] : null)))];
  const shape = `band:${chief}:${outlierIndices.join(",")}`;
  if (plot && plot.nbwShape === shape) {
    if (plot.width !== width) plot.setSize({ width, height: CHART_HEIGHT });
    plot.setData(data);
  } else {
    if (plot) plot.destroy();
    plot = new uPlot(bandOptions(box, width, outlierIndices, chief), data, box);
    plot.nbwShape = shape;
  }
  const name = (index) => {
    const w = workers.find((x) => x.index === index);
    return w ? workerName(w) : `#${index}`;
  };
  const item = (color, text, attrs = {}, fill = false) => {
    const swatch = h("span", { class: "nbw-swatch" });
    swatch.style.background = color;
    if (fill) swatch.style.border = `1px solid ${BAND_EDGE}`;
    legend.append(h("span", { class: "nbw-legend-item", ...attrs }, swatch, text));
  };
  const chiefLast = lastValue(xs, chiefYs);
  if (chiefLast) item(COLORS[0], `${name(chief)}: ${fmtNumber(chiefLast[1])} @ ${fmtNumber(chiefLast[0])}`, { "data-worker": chief });
  if (band) {
    const lo = lastValue(xs, band[0]);
    const hi = lastValue(xs, band[1]);
    const range = lo && hi ? `: ${fmtNumber(lo[1])}–${fmtNumber(hi[1])}` : "";
    const inBand = workers.length - ((outliers || {})[metric] || []).length;
    item(BAND_FILL, `min–max of ${inBand} worker${inBand === 1 ? "" : "s"}${range}`, { "data-band": "1" }, true);
  }
  outlierIndices.forEach((index, k) => {
    const last = lastValue(xs, lineOf.get(index));
    item(OUTLIER_COLORS[k % OUTLIER_COLORS.length], `outlier ${name(index)}${last ? `: ${fmtNumber(last[1])}` : ""}`, { "data-worker": index, "data-outlier": "1" });
  });
  return plot;
}
