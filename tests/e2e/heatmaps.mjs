// End-to-end, in Debian's chromium: statistics over layers and heads as
// heatmaps (issue 35). A client run fed over HTTP (4 layers x 4 heads of
// attention logits, one head growing until the attention_logit detector
// fires; residual RMS per layer; update ratios per tensor) gets a heatmap
// panel per statistic, drawn (cells of many colours), the heads grouped by
// layer; hovering a cell names its head, steps and value; the alert's
// flight-recorder button zooms the heatmaps to its window at full
// resolution and marks the alert; new steps arrive live. A stored run of
// 64 layers x 100,000 steps (written with sqlite3, as the Writer stores
// them) is drawn from 2,000 buckets at most.
// usage: node heatmaps.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const token = "e2e-token-0123456789";
const LAYERS = 4, HEADS = 4, GROWING = "layers.2.head.1";

const server = spawn(hlat, ["serve", "--store", store, "--create", "--port", "0", "--token", token],
                     { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill());
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const post = (what, body) => fetch(`${url}api/v1/runs/heads/${what}`, {
  method: "POST", headers: { "X-HLAT-Token": token }, body }).then(async (r) => ({ status: r.status, body: await r.json() }));

// One step's record: every head near 20 (a little apart by layer and head),
// the growing one x1.15 a step from step 300, at a tenth of the rate the
// client's schedule has ahead (lr_max_ahead): past the floor of 100 at ~312,
// where it projects beyond the bound of 1,000.
function record(step) {
  const logits = {}, rms = {}, ratio = {};
  for (let l = 0; l < LAYERS; l++) {
    for (let h = 0; h < HEADS; h++) logits[`layers.${l}.head.${h}`] = 18 + l + 0.5 * h + Math.sin(step / 7 + h);
    rms[`layers.${l}`] = 1 + 0.1 * l + step / 1000;
    ratio[`layers.${l}.qkv_proj`] = 1e-3 * (1 + 0.2 * l);
  }
  if (step >= 300) logits[GROWING] = 20 * 1.15 ** (step - 300);
  return JSON.stringify({ step, loss: 3 - step / 400, lr: 0.01, lr_max_ahead: 0.1, attn_logit_max: logits, residual_rms: rms, update_ratio: ratio });
}
const lines = (from, to) => Array.from({ length: to - from }, (_, i) => record(from + i)).join("\n") + "\n";
check((await post("start", JSON.stringify({ precision: "fp32" }))).status === 200, "a client run starts");
const fed = await post("ingest", lines(0, 330));
check(fed.status === 200, `330 steps with per-head, per-layer and per-tensor statistics are ingested (${fed.status})`);
const { alerts } = await (await fetch(`${url}api/v1/runs/heads/alerts`)).json();
const alert = alerts.find((a) => a.kind === "attention_logit");
const window_ = alert?.data?.flight_recorder;
check(Boolean(window_), `the growing head raises attention_logit with a flight-recorder window (${JSON.stringify(alert?.data)})`);

// The big one: 64 layers x 100,000 steps, one float32 row per step.
writeFileSync(path.join(work, "big.jsonl"), JSON.stringify({ step: 0, loss: 2 }) + "\n");
const made = spawnSync(hlat, ["ingest", "--store", store, "--run", "big", path.join(work, "big.jsonl")], { encoding: "utf8" });
const wrote = spawnSync("python3", ["-c", `
import sqlite3, struct, sys, json
db = sqlite3.connect(sys.argv[1])
run = db.execute("SELECT id FROM runs WHERE name = 'big'").fetchone()[0]
db.execute("INSERT OR IGNORE INTO metric_keys(name) VALUES ('residual_rms')")
key = db.execute("SELECT id FROM metric_keys WHERE name = 'residual_rms'").fetchone()[0]
db.execute("INSERT INTO vector_labels VALUES (?, ?, ?)", (run, key, json.dumps([f"layers.{l}" for l in range(64)])))
rows = ((run, key, s, 1.7e9 + s, struct.pack("<64f", *[1 + 0.01 * l + 1e-5 * s + (50 if l == 17 and s // 40 == 1500 else 0)
                                                      for l in range(64)])) for s in range(100000))
db.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?, ?)", rows)
db.commit()`, store], { encoding: "utf8" });
check(made.status === 0 && wrote.status === 0, `a run of 64 layers x 100,000 steps is stored ${made.stderr}${wrote.stderr}`);

const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1200 } });
  await page.goto(`${url}static/run.html?run=heads`);
  await page.waitForFunction(() => window.hlatDashboard?.heatmapsDrawn > 0, null, { timeout: 15000 });
  const panels = await page.$$eval("#heatmaps .heatmap", (boxes) => boxes.map((b) => b.dataset.key));
  check(["attn_logit_max", "residual_rms", "update_ratio"].every((k) => panels.includes(k)),
        `a heatmap panel per statistic (${panels})`);
  const title = await page.locator('.heatmap[data-key="attn_logit_max"] h3').innerText();
  const about = await page.locator('.heatmap[data-key="attn_logit_max"] .heatmap-about').innerText();
  check(title === "largest attention logit per head" && about.includes("16 heads, grouped by layer"),
        `the per-head view is titled and says what its rows are (${title}; ${about})`);
  const legend = await page.locator('.heatmap[data-key="attn_logit_max"] .heatmap-legend').innerText();
  check(/log scale/.test(legend) && /largest value/.test(legend), `its legend gives the range and the scale (${legend})`);
  // Drawn: the cells' area holds many colours, not a blank canvas.
  const colours = await page.$eval('.heatmap[data-key="attn_logit_max"] canvas', (c) => {
    const d = c.getContext("2d").getImageData(140 * devicePixelRatio, 0, c.width - 150 * devicePixelRatio, 60).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    return seen.size;
  });
  check(colours >= 8, `the heatmap is drawn (${colours} colours among its cells)`);
  check(await page.locator('.heatmap[data-key="attn_logit_max"] .heatmap-line canvas').count() > 0,
        "with the largest logit over all heads as a line");

  // Hover the growing head's row (layer 2, head 1: row 9 of 16) near the last step.
  const canvas = page.locator('.heatmap[data-key="attn_logit_max"] canvas').first();
  const box = await canvas.boundingBox();
  const rowH = await page.evaluate(() => Math.max(2, Math.min(16, Math.floor(320 / 16))));
  await page.mouse.move(box.x + box.width - 12, box.y + 9.5 * rowH);
  const tip = await page.locator('.heatmap[data-key="attn_logit_max"] .heatmap-tip').innerText();
  check(/^layer 2, head 1 · steps? [\d,–]+ · [\d.e+]+/.test(tip), `hovering a cell names the head, steps and value ("${tip}")`);
  await page.mouse.move(box.x + 1, box.y + 1);

  // The alert's button zooms to its window, at one step a column, the alert marked.
  const button = page.locator("#alerts button.flight-recorder").first();
  check((await button.innerText()).includes(`${window_?.first_step}–${window_?.last_step}`),
        `the alert lists its flight-recorder window (${await button.innerText()})`);
  const before = await page.evaluate(() => window.hlatDashboard.heatmapsDrawn);
  await button.click();
  await page.waitForFunction((b) => window.hlatDashboard.heatmapsDrawn > b && window.hlatDashboard.zoom, before, { timeout: 10000 });
  const zoomed = await page.evaluate(() => {
    const d = window.hlatDashboard, h = d.heatmaps.find((x) => x.key === "attn_logit_max");
    return { zoom: d.zoom, marked: d.marked?.step, steps: h.steps, url: location.search };
  });
  const full = zoomed.steps.every(([a, b]) => a === b) && zoomed.steps.length === window_.last_step - window_.first_step + 1;
  check(zoomed.zoom?.join() === `${window_.first_step},${window_.last_step}` && zoomed.marked === alert.step && full,
        `the window button zooms the heatmaps to steps ${zoomed.zoom} at full resolution (${zoomed.steps.length} columns), ` +
        `the alert at ${zoomed.marked} marked`);
  check(zoomed.url.includes(`from=${window_.first_step}`), "and the link to this view keeps the zoom");
  await page.screenshot({ path: path.join(work, "heatmaps-window.png"), fullPage: true });

  // Live: new steps reach the heatmaps of an unzoomed page.
  await page.click("#reset-zoom");
  await page.waitForFunction(() => !window.hlatDashboard.zoom && window.hlatDashboard.heatmaps.length > 0, null, { timeout: 10000 });
  await post("ingest", lines(330, 360));
  await page.waitForFunction(() => window.hlatDashboard.heatmaps.find((h) => h.key === "residual_rms")?.steps.at(-1)[1] >= 350,
                             null, { timeout: 20000 }).then(() => check(true, "new steps reach the heatmaps live"),
                                                             () => check(false, "new steps reach the heatmaps live"));

  // 64 layers x 100,000 steps.
  const t0 = Date.now();
  await page.goto(`${url}static/run.html?run=big`);
  await page.waitForFunction(() => window.hlatDashboard?.heatmapsDrawn > 0, null, { timeout: 30000 });
  const big = await page.evaluate(() => {
    const h = window.hlatDashboard.heatmaps[0];
    const c = document.querySelector('.heatmap[data-key="residual_rms"] canvas');
    const d = c.getContext("2d").getImageData(140, 0, c.width - 150, c.height - 30).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    return { labels: h.labels.length, buckets: h.steps.length, first: h.steps[0][0], last: h.steps.at(-1)[1], colours: seen.size };
  });
  check(big.labels === 64 && big.buckets <= 2000 && big.first === 0 && big.last === 99999 && big.colours > 20,
        `64 layers x 100,000 steps are drawn from ${big.buckets} buckets (${big.colours} colours) in ${Date.now() - t0} ms`);
  await page.screenshot({ path: path.join(work, "heatmaps-big.png"), fullPage: true });
} catch (e) {
  check(false, `browser session: ${e.message}`);
} finally {
  await browser.close();
}
console.log(`screenshots in ${work}`);
finish();
