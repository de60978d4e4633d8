// End-to-end, in Debian's chromium: a stored 20,000-step run with one-step
// spikes planted at known steps must show every spike at full range, on the
// run page and in the compare view (read back from uPlot's data and from the
// chart's canvas pixels), with alert markers at the alert steps, a wall-time
// axis, log scale, the metric picker, CSV export and a permalink that
// restores the view. Saves the screenshots README and docs/ show.
// usage: node envelopes.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");

// Two 20k-step logs: a decaying loss and a flat grad norm with small noise,
// one-step spikes planted at known steps, a held-out loss every 250 steps and
// a custom key every 100.
const STEPS = 20000;
const LOSS_SPIKES = { a: [1234, 5077, 8715, 12505, 17333], b: [2500, 9999, 15555] };
const GRAD_SPIKES = { a: { 8715: 4.29, 3001: 2.02, 12000: 1.5, 16000: 1.44 }, b: { 7000: 3.1 } };
let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
function log(which) {
  const lines = [];
  for (let s = 0; s < STEPS; s++) {
    const base = 2 + 4 * Math.exp(-s / 3000) + 0.02 * rand();
    const r = { step: s, time: 1.7e9 + 0.25 * s, loss: LOSS_SPIKES[which].includes(s) ? base + 3 : base,
                grad_norm: GRAD_SPIKES[which][s] ?? 1 + 0.05 * rand(), lr: 3e-4 };
    if (s % 250 === 0) r.heldout_loss = base + 0.1;
    if (s % 100 === 0) r["train/custom_metric"] = Math.sin(s / 1000);
    lines.push(JSON.stringify(r));
  }
  return lines.join("\n") + "\n";
}
const env = { ...process.env };
const BLUE = "#1f6feb", ORANGE = "#d4770c";  // the first two series colours (web/static/series.js)
for (const which of ["a", "b"]) {
  const file = path.join(work, `${which}.jsonl`);
  writeFileSync(file, log(which));
  const ingest = spawnSync(hlat, ["ingest", "--store", store, "--run", `long-${which}`, file], { encoding: "utf8", env });
  check(ingest.status === 0, `a 20,000-step log ingests as long-${which} ${ingest.stderr}`);
}

const browser = await launchChromium();
const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", "e2e-token-0123456789"], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill());  // however the script ends
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});

// In the page: for each planted (step, value), the bucket that holds the step
// reaches the value in the series labelled `label`, and the canvas shows the
// envelope's edge there: some pixel within 2 of the peak is nearer the
// series' colour than the white background (an alert marker, red and
// translucent, is not; nor is the band's fill alone, too pale to see).
const spikesDrawn = (chartExpr, label, color, spikes) => `(() => {
  const u = ${chartExpr};
  const xs = u.data[0], i = u.series.findIndex((s) => s.label === ${JSON.stringify(label)});
  if (i < 0) return "no series " + ${JSON.stringify(label)};
  const want = [1, 3, 5].map((k) => parseInt(${JSON.stringify(color)}.slice(k, k + 2), 16));
  const dist = (p, q) => Math.abs(p[0] - q[0]) + Math.abs(p[1] - q[1]) + Math.abs(p[2] - q[2]);
  const ctx = u.ctx, out = [];
  for (const [step, value] of ${JSON.stringify(spikes)}) {
    const j = xs.findIndex((x) => x >= step);
    const top = u.data[i][j];
    if (!(top >= value - 1e-9)) { out.push(step + ": bucket max " + top + " < " + value); continue; }
    const px = Math.round(u.valToPos(xs[j], "x", true)), py = Math.round(u.valToPos(value, "y", true));
    const px5 = ctx.getImageData(px - 2, py - 2, 5, 5).data;
    let best = null;
    for (let k = 0; k < px5.length; k += 4) {
      const a = px5[k + 3] / 255;  // the canvas is transparent over the page's white
      const rgb = [0, 1, 2].map((c) => px5[k + c] * a + 255 * (1 - a));
      if (best === null || dist(rgb, want) < dist(best, want)) best = rgb;
    }
    if (dist(best, want) >= dist(best, [255, 255, 255])) out.push(step + ": no envelope at the peak (" + best + ")");
  }
  return out.join("; ");
})()`;

try {
  const detect = spawnSync(hlat, ["detect", "--store", store, "--run", "long-a", "--save"], { encoding: "utf8", env });
  check(detect.status === 0 || detect.status === 3, `hlat detect --save stores the detectors' alerts (exit ${detect.status})`);

  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  // The runs list: a tag and note set through the API, filtered by tag, sorted by name.
  const tagged = await fetch(`${url}api/v1/runs/long-b/annotate`, { method: "POST", headers: { "X-HLAT-Token": "e2e-token-0123456789" },
    body: JSON.stringify({ tags: ["baseline"], note: "seed 2" }) });
  check(tagged.status === 200, "a run's tags and note are set with the token");
  await page.goto(url);
  await page.getByRole("link", { name: "long-a" }).waitFor({ timeout: 10000 });
  await page.fill("#filter", "baseline");
  const filtered = await page.$$eval("#runs tbody tr", (rows) => rows.map((r) => r.children[1].textContent));
  check(filtered.length === 1 && filtered[0].includes("long-b") && filtered[0].includes("baseline"),
        `the runs list filters by tag (${filtered})`);
  await page.fill("#filter", "");
  await page.click('th[data-key="name"]');
  await page.click('th[data-key="name"]');
  const order = await page.$$eval("#runs tbody tr td:nth-child(2) a", (links) => links.map((a) => a.textContent));
  check(order.join() === "long-b,long-a", `and sorts by name, descending on a second click (${order})`);

  await page.goto(`${url}static/run.html?run=long-a`);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.charts.loss, null, { timeout: 15000 });
  const buckets = await page.evaluate(() => window.hlatDashboard.charts.loss.data[0].length);
  check(buckets < 2000, `the loss chart is downsampled (${buckets} x values for 20,000 steps)`);
  const lossSpikes = LOSS_SPIKES.a.map((s) => [s, 2 + 4 * Math.exp(-s / 3000) + 3]);
  let bad = await page.evaluate(spikesDrawn("window.hlatDashboard.charts.loss", "loss max", BLUE, lossSpikes));
  check(bad === "", `every planted loss spike is inside the drawn envelope ${bad}`);
  bad = await page.evaluate(spikesDrawn("window.hlatDashboard.charts.grad_norm", "grad_norm max", BLUE, Object.entries(GRAD_SPIKES.a).map(([s, v]) => [Number(s), v])));
  check(bad === "", `every planted grad-norm spike is inside the drawn envelope ${bad}`);
  const episodes = await page.evaluate(() => window.hlatDashboard.episodes.map((e) => e[2]));
  check(Object.keys(GRAD_SPIKES.a).every((s) => episodes.includes(Number(s))),
        `grad-norm shading covers every planted spike (peaks ${episodes.slice(0, 10).join(",")}${episodes.length > 10 ? ",…" : ""})`);

  const alerts = await page.evaluate(() => window.hlatDashboard.alerts.map((a) => a.step));
  check(alerts.length > 0, `the detectors' alerts are listed (${alerts.length}: steps ${alerts.slice(0, 8).join(",")})`);
  // Red; an info alert (a one-step loss outlier, a note) faintly, in grey.
  const markers = await page.evaluate(() => {
    const u = window.hlatDashboard.charts.loss, out = [];
    for (const a of window.hlatDashboard.alerts) {
      const px = Math.round(u.valToPos(a.step, "x", true)), py = Math.round(u.bbox.top + 2 * devicePixelRatio);
      const [r, g, b] = u.ctx.getImageData(px, py, 1, 1).data;
      const red = r > 150 && g < 120 && b < 120, grey = Math.abs(r - b) < 40 && r < 200;
      if (!(a.severity === "info" ? grey : red)) out.push(`${a.step} (${a.severity}): (${r},${g},${b})`);
    }
    return out.join("; ");
  });
  check(markers === "", `a marker is drawn at every alert step, red, grey for info notes ${markers}`);

  // SVG export: the grad-norm chart as vectors, its band reaching the highest
  // planted spike and a mark per alert; the button downloads the same file.
  const highest = Math.max(...Object.values(GRAD_SPIKES.a));
  const [download] = await Promise.all([page.waitForEvent("download"),
                                        page.click('.chart[data-panel="grad_norm"] .chart-tools .svg')]);
  const svgFile = readFileSync(await download.path(), "utf8");
  const svg = await page.evaluate(([text, highest]) => {
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    if (doc.querySelector("parsererror")) return "does not parse";
    const u = window.hlatDashboard.charts.grad_norm;
    const top = Math.min(...[...doc.querySelectorAll("polygon")].flatMap((p) =>
      p.getAttribute("points").trim().split(" ").map((xy) => Number(xy.split(",")[1]))));
    const expected = u.bbox.top / devicePixelRatio + 24 + u.valToPos(highest, "y");
    const marks = doc.querySelectorAll("path.mark").length;
    return `${doc.querySelectorAll("polyline").length > 0 ? "lines" : "no lines"}, band top ${Math.abs(top - expected) < 1 ? "at" : "off"} ` +
           `the highest spike, ${marks === window.hlatDashboard.alerts.length ? "a mark per alert" : `${marks} marks`}, ` +
           `${text === window.hlatDashboard.svg("grad_norm") ? "downloaded" : "download differs"}`;
  }, [svgFile, highest]);
  check(svg === "lines, band top at the highest spike, a mark per alert, downloaded", `SVG export of a chart (${svg})`);

  await page.selectOption("#x-axis", "time");
  const times = await page.evaluate(() => {
    const xs = window.hlatDashboard.charts.loss.data[0];
    return [xs.length, xs.filter((x) => Number.isFinite(x)).length, xs[0], xs.at(-1)];
  });
  check(times[0] > 100 && times[1] === times[0] && times[3] - times[2] > 4000,
        `the wall-time axis has a time for every bucket (${times[1]} of ${times[0]}, spanning ${Math.round(times[3] - times[2])} s)`);
  await page.selectOption("#x-axis", "step");

  await page.click('.chart[data-panel="loss"] .chart-tools .log');
  await page.waitForFunction(() => window.hlatDashboard.charts.loss?.scales.y.distr === 3, null, { timeout: 5000 });
  check(true, "log y toggles the loss chart to a log scale");

  await page.click("#picker summary");
  await page.check('#picker input[value="train/custom_metric"]');
  await page.waitForSelector('.chart[data-panel="key:train/custom_metric"] canvas', { timeout: 10000 });
  const custom = await page.evaluate(() => window.hlatDashboard.series["train/custom_metric"].steps.length);
  check(custom === 200, `the metric picker draws a custom key (${custom} points)`);

  const csv = await page.evaluate(async () => {
    const href = document.querySelector('.chart[data-panel="loss"] a.csv').href;
    const text = await (await fetch(href)).text();
    const stored = (await (await fetch("/api/v1/runs/long-a/series?key=loss")).json()).points;
    const rows = text.trim().split("\n");
    const header = rows.shift().split(",");
    const col = header.indexOf("loss");
    const mismatched = stored.filter(([step, value], i) => {
      const cells = rows[i]?.split(",");
      return !cells || Number(cells[0]) !== step || Number(cells[col]) !== value;
    });
    return `${rows.length} rows, ${mismatched.length} differ`;
  });
  check(csv === `${STEPS} rows, 0 differ`, `CSV export of the loss chart round-trips the stored values (${csv})`);

  await page.fill("#smoothing", "0.3");
  await page.dispatchEvent("#smoothing", "input");
  await page.click("#alerts li a");  // zoom around the first alert
  await page.waitForFunction(() => window.hlatDashboard.zoom !== null, null, { timeout: 5000 });
  await page.waitForFunction(() => window.hlatDashboard.charts.loss?.data[0].length > 0, null, { timeout: 5000 });
  const view = await page.evaluate(() => JSON.stringify({ zoom: window.hlatDashboard.zoom, smoothing: window.hlatDashboard.smoothing,
    log: [...window.hlatDashboard.logPanels], shown: [...window.hlatDashboard.shown].sort() }));
  const link = await page.inputValue("#permalink");
  await page.screenshot({ path: path.join(work, "dashboard-envelopes.png"), fullPage: false });
  const again = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await again.goto(link);
  await again.waitForFunction(() => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.charts.loss, null, { timeout: 15000 });
  const restored = await again.evaluate(() => JSON.stringify({ zoom: window.hlatDashboard.zoom, smoothing: window.hlatDashboard.smoothing,
    log: [...window.hlatDashboard.logPanels], shown: [...window.hlatDashboard.shown].sort() }));
  check(restored === view, `the permalink restores the view (${restored})`);

  // Full range again for the README's screenshot, then the compare view.
  await again.goto(`${url}static/run.html?run=long-a`);
  await again.waitForFunction(() => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.charts.grad_norm, null, { timeout: 15000 });
  await again.screenshot({ path: path.join(work, "dashboard.png"), fullPage: false });

  await page.goto(`${url}static/compare.html?runs=long-a,long-b&key=grad_norm`);
  await page.waitForFunction(() => window.hlatCompare?.chart, null, { timeout: 15000 });
  for (const which of ["a", "b"]) {
    bad = await page.evaluate(spikesDrawn("window.hlatCompare.chart", `long-${which} max`, which === "a" ? BLUE : ORANGE,
                                          Object.entries(GRAD_SPIKES[which]).map(([s, v]) => [Number(s), v])));
    check(bad === "", `compare: every grad-norm spike of long-${which} is inside its envelope ${bad}`);
  }
  await page.selectOption("#key", "loss");
  await page.waitForFunction(() => window.hlatCompare.key === "loss", null, { timeout: 10000 });
  bad = await page.evaluate(spikesDrawn("window.hlatCompare.chart", "long-b max", ORANGE, LOSS_SPIKES.b.map((s) => [s, 2 + 4 * Math.exp(-s / 3000) + 3])));
  check(bad === "", `compare: every loss spike of long-b is inside its envelope ${bad}`);
  const compareCsv = await page.evaluate(() => window.hlatCompare.csv());
  const header = compareCsv.split("\n")[0].split(",");
  const maxCol = header.indexOf("long-b:max");
  const tops = new Set(compareCsv.trim().split("\n").slice(1).map((row) => Number(row.split(",")[maxCol])));
  const planted = LOSS_SPIKES.b.map((s) => 2 + 4 * Math.exp(-s / 3000) + 3);
  const missing = planted.filter((v) => ![...tops].some((t) => Math.abs(t - v) < 0.05));
  check(maxCol > 0 && missing.length === 0, `compare's CSV export carries each run's envelope (${missing.length} planted spikes missing)`);
  await page.screenshot({ path: path.join(work, "compare.png"), fullPage: false });
} catch (e) {
  check(false, `browser checks: ${e.message}`);
} finally {
  await browser.close();
}
finish();
