// Charts through the vendored uPlot (window.uPlot, loaded by index.html before the modules).

/** A bar chart of `values` at unix-second `xs` into `el`, sized to its width (and resized with the window). */
export function barChart(el, xs, values, label, colour = "#0b5cad") {
  const uPlot = window.uPlot;
  const width = () => Math.max(280, el.clientWidth || 600);
  const opts = {
    width: width(), height: 200, legend: { show: false },
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
    axes: [{ stroke: "#545454", grid: { stroke: "#e4e4df" } }, { stroke: "#545454", grid: { stroke: "#e4e4df" } }],
    series: [{}, { label, stroke: colour, fill: `${colour}cc`, width: 1, paths: uPlot.paths.bars({ size: [0.8, 40] }), points: { show: false } }],
  };
  const plot = new uPlot(opts, [xs, values], el);
  const resize = () => {
    if (!el.isConnected) { window.removeEventListener("resize", resize); return; }
    plot.setSize({ width: width(), height: 200 });
  };
  window.addEventListener("resize", resize);
  return plot;
}
