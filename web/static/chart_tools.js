// The buttons above a run chart: log y, CSV (the stored values of its keys
// over the range shown), PNG and SVG. A row of their own above the chart,
// so a long title is never covered.
import { downloadPng, downloadSvg } from "./chart_export.js";

// A chart's box: its tools and its hover tip (hover.js showHoverTip).
//   log: whether y is logarithmic; onLog(): toggle it; csvHref; fileName;
//   chart(): the drawn uPlot; marks(): the x values the SVG marks as alerts.
export function chartBox(panel, { log, onLog, csvHref, fileName, chart, marks }) {
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.panel = panel.id;
  const tools = document.createElement("div");
  tools.className = "chart-tools";
  const button = (className, textContent, onClick) => {
    const b = Object.assign(document.createElement("button"), { type: "button", className, textContent });
    b.addEventListener("click", onClick);
    return b;
  };
  const logButton = button("log", "log y", onLog);
  logButton.classList.toggle("on", log);
  const csv = Object.assign(document.createElement("a"), { className: "csv", textContent: "CSV", download: `${fileName}.csv`,
                                                           href: csvHref });
  tools.append(logButton, csv, button("png", "PNG", () => downloadPng(chart(), fileName)),
               button("svg", "SVG", () => downloadSvg(chart(), fileName, marks())));
  const tip = Object.assign(document.createElement("div"), { className: "value-tip" });
  tip.append(Object.assign(document.createElement("div"), { className: "lines" }),
             Object.assign(document.createElement("div"), { className: "alert-tip" }));
  box.append(tools, tip);
  return { box, tip };
}
