// End-to-end, in Debian's chromium: the page draws from the server's metric
// catalogue. A stored run with hlat's keys, a key nobody catalogued and two
// per-rank keys (one the page's old list knew, one it did not) gets its
// default charts with their catalogue titles, a chart for the new per-rank
// key, and the new key under its group in the picker, drawn when picked (and
// from a permalink); the catalogue comes in the one keys request. The compare
// view lists keys by group and titles its chart from the catalogue.
// usage: node catalogue.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const STEPS = 40;
const NEW_KEY = "attn/entropy_min", NEW_RANK_KEY = "rank/io_wait_s", OLD_RANK_KEY = "rank/compute_s";

for (const name of ["cat-a", "cat-b"]) {
  const lines = [];
  for (let s = 0; s < STEPS; s++)
    lines.push(JSON.stringify({ step: s, time: 1.7e9 + s, loss: 4 - s / 20, grad_norm: 1 + (s % 3) / 10, lr: 3e-4,
                                data_s: 0.01, forward_s: 0.05, [NEW_KEY]: 2 + Math.sin(s) }));
  const file = path.join(work, `${name}.jsonl`);
  writeFileSync(file, lines.join("\n") + "\n");
  const ingest = spawnSync(hlat, ["ingest", "--store", store, "--run", name, file], { encoding: "utf8" });
  check(ingest.status === 0, `a log with a key nobody catalogued ingests as ${name} ${ingest.stderr}`);
}
// A run in another trainer's own names, none of which feeds a detector.
{
  const lines = [];
  for (let s = 0; s < STEPS; s++) lines.push(JSON.stringify({ step: s, time: 1.7e9 + s, objective: 3 - s / 40, acc: s / 40 }));
  writeFileSync(path.join(work, "own.jsonl"), lines.join("\n") + "\n");
  const ingest = spawnSync(hlat, ["ingest", "--store", store, "--run", "own-names", path.join(work, "own.jsonl")],
                           { encoding: "utf8" });
  check(ingest.status === 0 && /is not watched/.test(ingest.stdout + ingest.stderr),
        "a log whose keys feed no detector ingests, and says it is not watched");
}
// Per-rank points as the trainer's fleet hook stores them (nothing that
// ingests a log writes them): two ranks, every step, for both keys.
const sql = `
  INSERT OR IGNORE INTO metric_keys(name) VALUES ('${OLD_RANK_KEY}'), ('${NEW_RANK_KEY}');
  WITH RECURSIVE steps(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM steps WHERE s < ${STEPS - 1}),
       ranks(r) AS (VALUES (0), (1))
  INSERT INTO rank_metrics (run_id, key_id, step, rank, value, wall_time)
    SELECT runs.id, metric_keys.id, s, r, 0.1 + 0.05 * r + 0.001 * s, 1.7e9 + s
    FROM steps, ranks, runs, metric_keys
    WHERE runs.name = 'cat-a' AND metric_keys.name IN ('${OLD_RANK_KEY}', '${NEW_RANK_KEY}');`;
const stored = spawnSync("sqlite3", [store, sql], { encoding: "utf8" });
check(stored.status === 0, `per-rank points are stored for cat-a ${stored.stderr}`);

const browser = await launchChromium();
const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", "e2e-token-0123456789"],
                     { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill());
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const panelTitle = (page, id) => page.locator(`.chart[data-panel="${id}"] .u-title`).innerText();

try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const asked = [];
  page.on("request", (r) => asked.push(new URL(r.url()).pathname));
  await page.goto(`${url}static/run.html?run=cat-a`);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.rankPanels.length === 2, null,
                             { timeout: 15000 });
  const drawn = await page.$$eval("#charts .chart", (boxes) => boxes.map((b) => b.dataset.panel));
  check(drawn.join() === `loss,grad_norm,lr,step_time,${OLD_RANK_KEY},${NEW_RANK_KEY}`,
        `the default charts, then a chart per rank key, the new one included (${drawn})`);
  check(await panelTitle(page, "grad_norm") === "grad norm (before clipping)" &&
        await panelTitle(page, "step_time") === "step time split (s)",
        "shared charts carry the catalogue's titles");
  check(await panelTitle(page, NEW_RANK_KEY) === `per rank: ${NEW_RANK_KEY}`,
        `the new per-rank key gets a chart titled from its name (${await panelTitle(page, NEW_RANK_KEY)})`);
  const lines = await page.evaluate((key) => {
    const p = window.hlatDashboard.rankPanels.find((r) => r.key === key);
    return p ? p.series.slice(1).map((s, i) => `${s.label}:${p.data[1 + i].filter((v) => v !== null).length}`) : [];
  }, NEW_RANK_KEY);
  check(lines.join() === `rank 0:${STEPS},rank 1:${STEPS}`, `with a line per rank (${lines})`);
  check(!asked.some((p) => p.endsWith("/rank_keys")) && asked.filter((p) => p.endsWith("/keys")).length === 1,
        "the catalogue comes with the run's keys, in one request");

  await page.click("#picker summary");
  const group = await page.locator(`#picker fieldset:has(input[value="${NEW_KEY}"]) legend`).innerText();
  check(group === "attn", `the new key is in the picker under its prefix (${group})`);
  await page.check(`#picker input[value="${NEW_KEY}"]`);
  await page.waitForSelector(`.chart[data-panel="key:${NEW_KEY}"] canvas`, { timeout: 10000 });
  const points = await page.evaluate((key) => window.hlatDashboard.series[key].steps.length, NEW_KEY);
  check(points === STEPS && await panelTitle(page, `key:${NEW_KEY}`) === NEW_KEY,
        `picked, the new key gets a chart of its own titled by its name (${points} points)`);
  const link = await page.inputValue("#permalink");
  const again = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await again.goto(link);
  await again.waitForSelector(`.chart[data-panel="key:${NEW_KEY}"] canvas`, { timeout: 10000 });
  check(true, "and its permalink draws it again");
  await page.screenshot({ path: path.join(work, "catalogue.png"), fullPage: true });

  await page.goto(`${url}static/run.html?run=own-names`);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0, null, { timeout: 15000 });
  const notice = await page.locator("#unwatched").innerText();
  check(await page.locator("#unwatched").isVisible() && notice.includes("acc, objective"),
        `a run no detector watches says so on its page (${notice.slice(0, 80)}...)`);
  const ownCharts = await page.$$eval("#charts .chart", (boxes) => boxes.map((b) => b.dataset.panel));
  check(ownCharts.join() === "key:acc,key:objective", `and opens on charts of its own keys (${ownCharts})`);
  await page.goto(`${url}static/run.html?run=cat-a`);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0, null, { timeout: 15000 });
  check(await page.locator("#unwatched").isHidden(), "a watched run shows no such notice");

  await page.goto(`${url}static/compare.html?runs=cat-a,cat-b&key=grad_norm`);
  await page.waitForFunction(() => window.hlatCompare?.chart, null, { timeout: 15000 });
  // With a key in the address the chart is drawn first and the picker filled
  // after it (compare.js): wait for the picker too.
  await page.waitForSelector("#key optgroup", { state: "attached", timeout: 15000 });
  const groups = await page.$$eval("#key optgroup", (gs) => gs.map((g) => g.label));
  check(groups.join() === "training,speed,attn", `compare lists the keys by catalogue group (${groups})`);
  const title = await page.locator("#chart .u-title").innerText();
  check(title === "grad norm (before clipping)", `and titles its chart from the catalogue (${title})`);
} catch (e) {
  check(false, `browser checks: ${e.message}`);
} finally {
  await browser.close();
}
finish();
