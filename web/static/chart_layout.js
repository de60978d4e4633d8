// How the run page lays its charts out: 1, 2 or 3 columns (the permalink's
// `cols`, else the last choice in this browser), and each chart's height,
// which the reader changes by dragging the chart's bottom edge (kept per
// panel in this browser, so a redraw or a reload keeps it).
export const DEFAULT_HEIGHT = 300;
// #charts' gap; a chart box's padding and border, and room for a scroll bar
// (two columns are as wide as they always were: the same buckets).
const MIN_HEIGHT = 120, GAP = 12, BOX_EXTRA = 18;
const COLUMNS_KEY = "hlat.columns", HEIGHTS_KEY = "hlat.chartHeights";

const stored = (key, fallback) => {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;  // storage off or unreadable: the defaults
  }
};
const store = (key, value) => {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch {
    // storage off: the choice lasts as long as the page
  }
};

export function initialColumns(param) {
  const n = Number(param ?? stored(COLUMNS_KEY, 2));
  return [1, 2, 3].includes(n) ? n : 2;
}
export const rememberColumns = (n) => store(COLUMNS_KEY, n);

// A chart's width in `container` laid out in `columns` columns.
export function chartWidth(container, columns) {
  return Math.max(320, Math.floor((container.clientWidth - (columns - 1) * GAP) / columns) - BOX_EXTRA);
}

const heights = stored(HEIGHTS_KEY, {});
export const chartHeight = (panelId) => heights[panelId] ?? DEFAULT_HEIGHT;

// Makes `box` (holding uPlot chart u of panel panelId) resizable by its
// bottom edge: the plot follows the box, and the height is kept. Returns
// what stops watching it (called when the chart is destroyed).
export function resizable(box, u, panelId) {
  box.classList.add("resizable");
  let base = null;
  const observer = new ResizeObserver(() => {
    if (base === null) return void (base = box.clientHeight);  // the first call: as drawn
    const dh = box.clientHeight - base;
    if (Math.abs(dh) < 2) return;
    const h = Math.max(MIN_HEIGHT, u.height + dh);
    u.setSize({ width: u.width, height: h });
    base = box.clientHeight;
    heights[panelId] = h;
    store(HEIGHTS_KEY, heights);
  });
  observer.observe(box);
  return () => observer.disconnect();
}
