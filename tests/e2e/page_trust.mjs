// End-to-end, in Debian's chromium: the run page a tired reader can trust
// (issue 37). A 20,000-step run whose custom key has a NaN at 12,000 and an
// infinity at 14,000 shows a mark at each and a band from the first on; the
// hover over a one-step grad-norm spike of 4.29 (over ~0.3) reads its max at
// full zoom-out and its value at full resolution; a noisy healthy start is
// not shaded; log y has fine ticks; the x axis says when it falls back; a
// run whose loss went NaN at step 900 and stayed so is "diverged at step
// 900" (not at an earlier Inf it came back from) with its 600 alerts as one
// episode; a live run's page, with the server killed, says "disconnected —
// last heard ..." with Halt off, and comes back with the server; a refused
// halt's message stays beside the button until dismissed. Saves screenshots in WORK_DIR.
// usage: node page_trust.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const token = "e2e-token-0123456789abcdef";

let seed = 11;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const ingest = (name, lines) => {
  const file = path.join(work, `${name}.jsonl`);
  writeFileSync(file, lines.map((r) => JSON.stringify(r).replace(/"(NaN|Infinity)"/g, "$1")).join("\n") + "\n");
  const r = spawnSync(hlat, ["ingest", "--store", store, "--run", name, file], { encoding: "utf8" });
  check(r.status === 0, `${name} ingests ${r.status ? r.stderr : ""}`);
};

// The trust run: a noisy first 2,000 steps of grad norm (the server's spike
// rule finds many "episodes" there), then ~0.3 with one spike of 4.29; a
// custom key with a NaN and an Inf; an evaluation score every 1,000 steps;
// two info notes. JSON has no NaN: written bare, as Python's json.dumps does.
const SPIKE = 8715, NAN_STEP = 12000, INF_STEP = 14000;
const trust = [];
for (let s = 0; s < 20000; s++) {
  const r = { step: s, time: 1.7e9 + 0.25 * s, loss: 2 + 4 * Math.exp(-s / 3000) + 0.02 * rand(),
              grad_norm: s === SPIKE ? 4.29 : s < 2000 ? 0.3 + 0.3 * rand() : 0.3 + 0.02 * rand(), lr: 3e-4,
              "train/custom": s === NAN_STEP ? "NaN" : s === INF_STEP ? "Infinity" : Math.sin(s / 1000) };
  if (s % 1000 === 999) r["eval/hellaswag"] = 0.25 + s / 100000;
  trust.push(r);
  if (s === 3000 || s === 5000) trust.push({ step: s, alert: "outlier", text: "one-step loss outlier", level: "info" });
}
ingest("trust", trust);

// The NaN run: loss and grad norm NaN from step 900 to its end (1,499), the
// trainer alerting at every NaN step; an Inf grad norm at step 300 that it
// came back from (not where it diverged); times in 2030 (a clock that is wrong).
const nanRun = [];
for (let s = 0; s < 1500; s++) {
  const bad = s >= 900;
  nanRun.push({ step: s, time: 1.9e9 + 0.5 * s, loss: bad ? "NaN" : 3 + Math.exp(-s / 300) + 0.01 * rand(),
                grad_norm: bad ? "NaN" : s === 300 ? "Infinity" : 1 + 0.05 * rand() });
  if (bad) nanRun.push({ step: s, alert: "nan", text: "loss is NaN", level: "critical" });
}
ingest("nan-run", nanRun);

// The server, on a port it can be started on again after being killed.
let server = null;
async function serve(port = 0) {
  server = spawn(hlat, ["serve", "--store", store, "--port", String(port), "--token", token], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:(\d+)\/)/.exec(String(d)); if (m) resolve(m[1]); });
    server.on("exit", () => reject(new Error("hlat serve exited")));
  });
}
process.on("exit", () => server?.kill("SIGKILL"));
const url = await serve();
const port = Number(new URL(url).port);

const browser = await launchChromium();
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
// Zooms (to null: the full range) and waits for the load's draw.
const zoom = async (from, to) => {
  const before = await page.evaluate(() => window.hlatDashboard.drawn);
  await page.evaluate(([a, b]) => window.hlatDashboard.zoomTo(a, b), [from, to]);
  await page.waitForFunction(([b, a]) => window.hlatDashboard.drawn > b && (window.hlatDashboard.zoom?.[0] ?? null) === a,
                             [before, from === null ? null : Math.max(0, from)], { timeout: 15000 });
};
const drawn = (panel) => page.waitForFunction((p) => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.charts[p], panel,
                                              { timeout: 15000 });
try {
  await page.goto(`${url}static/run.html?run=trust&keys=loss,grad_norm,train/custom,eval/hellaswag`);
  await drawn("key:train/custom");
  await nonFiniteChecks();
  await hoverChecks();
  await readabilityChecks();
  await divergedChecks();
  await liveChecks();
} catch (e) {
  check(false, `browser checks: ${e.message}`);
} finally {
  await browser.close();
}
finish();

// A NaN and an Inf in a custom key: marked where they are, the band from the
// first on, the line broken at them at full resolution.
async function nonFiniteChecks() {
  const marks = await page.evaluate(() => {
    const bad = window.hlatDashboard.bad["key:train/custom"];
    const u = window.hlatDashboard.charts["key:train/custom"], dpr = devicePixelRatio;
    const colour = (x, y) => [...u.ctx.getImageData(Math.round(x), Math.round(y), 1, 1).data];
    return bad.map((b) => ({ ...b, diamond: colour(u.valToPos(b.step, "x", true), u.bbox.top + u.bbox.height - 4 * dpr),
                             band: colour(u.bbox.left + u.bbox.width - 3 * dpr, u.bbox.top + u.bbox.height / 2) }));
  });
  const at = (step, what) => marks.find((m) => m.first <= step && step <= m.step && m.what.includes(what));
  const nan = at(NAN_STEP, "NaN"), inf = at(INF_STEP, "+Inf");
  const red = (c) => c && c[0] > 120 && c[1] < 60 && c[2] < 80 && c[3] > 200;
  check(nan && inf && marks.length === 2, `the custom key's NaN and Inf are found (${marks.map((m) => `${m.what} in ${m.first}-${m.step}`)})`);
  check(red(nan?.diamond) && red(inf?.diamond), `each is marked on the chart (${nan?.diamond}; ${inf?.diamond})`);
  const band = marks[0]?.band;
  check(band && band[3] > 0 && band[0] > band[1], `a band runs from the first one to the end (${band})`);
  await page.screenshot({ path: path.join(work, "nonfinite.png") });
  await zoom(11990, 12010);
  const line = await page.evaluate((step) => {
    const u = window.hlatDashboard.charts["key:train/custom"];
    const j = u.data[0].indexOf(step), i = u.series.findIndex((s) => s.label === "train/custom");
    return [u.data[i][j - 1], u.data[i][j], u.data[i][j + 1], window.hlatDashboard.bad["key:train/custom"].map((b) => b.step)];
  }, NAN_STEP);
  check(line[1] === null && Number.isFinite(line[0]) && Number.isFinite(line[2]) && line[3].join() === String(NAN_STEP),
        `at full resolution the line breaks at the NaN, which is marked at its step (${line})`);
  await zoom(null);
}

// Hover over the bucket holding the 4.29 spike at full zoom-out, then over
// the spike's step at full resolution.
async function hoverOn(panel, step) {
  const point = await page.evaluate(([p, step]) => {
    const u = window.hlatDashboard.charts[p], s = window.hlatDashboard.series.grad_norm;
    const j = s.steps.findIndex((last, k) => s.first[k] <= step && step <= last);
    const box = u.over.getBoundingClientRect();
    return { x: box.left + u.valToPos(s.steps[j], "x"), y: box.top + box.height / 2, mean: s.line[j], bucket: s.first[j] !== s.steps[j] };
  }, [panel, step]);
  await page.mouse.move(point.x, point.y);
  await page.waitForTimeout(100);
  const tip = await page.locator(`.chart[data-panel="${panel}"] .value-tip .lines`).innerText().catch(() => "");
  return { ...point, tip };
}

async function hoverChecks() {
  const far = await hoverOn("grad_norm", SPIKE);
  check(far.bucket && far.mean < 1 && /grad_norm: max 4\.29 · min 0\.3\d* · last 0\.3/.test(far.tip),
        `hovering the spike's bucket at full zoom-out reads its max, not the mean ${far.mean.toFixed(3)} (${far.tip.replace(/\n/g, " | ")})`);
  await page.screenshot({ path: path.join(work, "hover.png") });
  await zoom(SPIKE - 100, SPIKE + 100);
  const near = await hoverOn("grad_norm", SPIKE);
  check(!near.bucket && near.tip.includes(`step ${SPIKE.toLocaleString("en-US")}`) && near.tip.includes("grad_norm: 4.29"),
        `and zoomed to full resolution, the step's value (${near.tip.replace(/\n/g, " | ")})`);
  await zoom(null);
}

// Spike shading, info notes, log ticks, the x axis, layout, PNG, search, evals.
async function readabilityChecks() {
  const shading = await page.evaluate(() => ({ all: window.hlatDashboard.episodes.length,
    shaded: window.hlatDashboard.shaded.map((e) => e[2]) }));
  check(shading.all > 20 && shading.shaded.join() === String(SPIKE),
        `of ${shading.all} spike episodes (most in the noisy start) only the alerted one is shaded (${shading.shaded})`);
  const summary = await page.locator("#alerts-summary").innerText();
  check(/2 info notes/.test(summary), `info notes are counted (${summary})`);
  const capped = await page.evaluate(async () => {  // a run of 3,001 one-spike episodes, of which the server lists 1,000
    const { showAlertList } = await import("/static/alert_list.js");
    const list = document.createElement("ul"), line = document.createElement("span");
    const episodes = Array.from({ length: 1000 }, (_, i) => ({ kind: "grad_spike", severity: "warning", first_step: 20 * i,
      last_step: 20 * i, worst_step: 20 * i, count: 1, message: "a spike" }));
    showAlertList(list, line, { episodes, episodesTotal: 3001, alerts: [], total: 3001, omitted: 3001, rewinds: [],
      whyOpen: new Set(), episodesOpen: new Set(), titleOf: (k) => k, onStep() {}, onRange() {}, onWindow() {} });
    return [line.textContent, list.children.length];
  });
  check(capped[0].startsWith("3,001 episodes from 3,001 alerts · the newest 1,000 episodes listed") && capped[1] === 1000,
        `a run with more episodes than listed says so (${capped[0]}; ${capped[1]} lines)`);
  check(await page.evaluate(() => "eval/hellaswag" in window.hlatDashboard.series && window.hlatDashboard.shown.has("eval/hellaswag")),
        "an evaluation score is drawn");
  await page.click('.chart[data-panel="grad_norm"] .chart-tools .log');
  await page.waitForFunction(() => window.hlatDashboard.charts.grad_norm?.scales.y.distr === 3, null, { timeout: 5000 });
  const ticks = await page.evaluate(() => window.hlatDashboard.charts.grad_norm.axes[1]._values ?? []);
  check(ticks.filter((t) => t && !/^10*$|^0\.0*1$/.test(t)).length >= 3, `log y labels more than decades (${ticks.join(" ")})`);
  await page.click('.chart[data-panel="grad_norm"] .chart-tools .log');
  await page.selectOption("#x-axis", "tokens");
  const note = await page.locator("#x-note").innerText();
  check(note === "tokens: not recorded by this run, showing steps", `the x axis says it falls back (${note})`);
  await page.selectOption("#x-axis", "step");
  await page.selectOption("#columns", "1");
  const widths = await page.evaluate(() => [window.hlatDashboard.charts.loss.width, document.querySelector("#charts").clientWidth]);
  check(widths[0] > 0.9 * widths[1] && (await page.inputValue("#permalink")).includes("cols=1"),
        `one column draws charts across the page, in the link (${widths})`);
  await page.selectOption("#columns", "2");
  const heights = await page.evaluate(async () => {
    const u = window.hlatDashboard.charts.loss, box = u.root.parentElement, before = u.height;
    box.style.height = `${box.getBoundingClientRect().height + 100}px`;  // as dragging its bottom edge does
    await new Promise((resolve) => setTimeout(resolve, 200));
    return [before, window.hlatDashboard.charts.loss.height];
  });
  check(heights[0] >= 300 && Math.abs(heights[1] - heights[0] - 100) <= 2, `charts are tall and resizable (${heights})`);
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('.chart[data-panel="grad_norm"] .chart-tools .png')]);
  const png = readFileSync(await download.path()).toString("base64");
  const corner = await page.evaluate(async (data) => {
    const img = new Image();
    img.src = `data:image/png;base64,${data}`;
    await img.decode();
    const c = Object.assign(document.createElement("canvas"), { width: img.width, height: img.height });
    const ctx = c.getContext("2d");
    ctx.drawImage(img, 0, 0);
    return [...ctx.getImageData(2, 2, 1, 1).data, img.height - window.hlatDashboard.charts.grad_norm.ctx.canvas.height];
  }, png);
  check(corner.slice(0, 4).join() === "255,255,255,255" && corner[4] > 30,
        `PNG export is opaque with room for a title and legend (corner ${corner.slice(0, 4)}, ${corner[4]} px taller)`);
  await page.click("#picker summary");
  await page.fill("#picker-filter", "custom");
  const visible = await page.$$eval("#picker label", (ls) => ls.filter((l) => !l.hidden).map((l) => l.textContent));
  check(visible.join() === "train/custom", `the picker's search keeps the matching keys (${visible})`);
  await page.fill("#picker-filter", "");
  await page.click("#picker summary");
}

// A run that went NaN: "diverged at step 900", its 600 alerts one episode, a short page.
async function divergedChecks() {
  await page.goto(`${url}static/run.html?run=nan-run`);
  await drawn("loss");
  await page.waitForFunction(() => window.hlatDashboard.alertEpisodes.length > 0, null, { timeout: 10000 });
  const status = await page.locator("#run-status").innerText();
  const cls = await page.locator("#run-status").getAttribute("class");
  check(status === "diverged at step 900" && cls.includes("diverged"),
        `the NaN run is shown diverged where its NaN stretch began, not at the Inf at 300 (${status}; ${cls})`);
  const seen = await page.evaluate(() => ({
    alerts: window.hlatDashboard.alerts.length,
    episodes: window.hlatDashboard.alertEpisodes.map((e) => `${e.kind}x${e.count}@${e.first_step}-${e.last_step}`),
    rows: document.querySelectorAll("#alerts > li").length,
    marks: new DOMParser().parseFromString(window.hlatDashboard.svg("loss"), "image/svg+xml").querySelectorAll("path.mark").length,
    height: document.documentElement.scrollHeight,
  }));
  const nan = seen.episodes.find((e) => e.startsWith("alertx600@900-1499"));
  check(nan && seen.rows === seen.episodes.length && seen.marks === seen.episodes.length,
        `its ${seen.alerts} alerts are ${seen.episodes.length} episodes: ${seen.rows} lines, ${seen.marks} marks (${seen.episodes})`);
  check(seen.height < 1500, `and the page stays short (${seen.height} px)`);
  const row = await page.locator("#alerts > li.episode").first().innerText();
  check(row.startsWith("alert ×600, steps 900–1499"), `the episode's line (${row.split("\n")[0]})`);
  await page.screenshot({ path: path.join(work, "diverged.png"), fullPage: true });
  await page.locator("#alerts > li.episode details summary").first().click();
  // The episode's alerts are filled in when it opens: wait for them rather than read at once.
  await page.waitForFunction(() => document.querySelectorAll("#alerts > li.episode details li").length >= 200,
                             null, { timeout: 10000 }).catch(() => {});
  const opened = await page.evaluate(() => [document.querySelectorAll("#alerts > li.episode details li").length,
                                            document.documentElement.scrollHeight]);
  check(opened[0] >= 200 && opened[1] < 2000, `which opens to its alerts, in a box of its own (${opened[0]} lines, page ${opened[1]} px)`);
  const time = await page.locator('#x-axis option[value="time"]').evaluate((o) => [o.disabled, o.textContent]);
  check(time[0] === true, `wall time is not offered for times in 2030 (${time[1]})`);
}

// A live run (started through the HTTP API, as the Python client does): a
// refused halt's message stays; the server killed, the header says so and
// Halt is off; the server back, the page is too.
async function liveChecks() {
  const post = (what, body) => fetch(`${url}api/v1/runs/live/${what}`, { method: "POST", headers: { "X-HLAT-Token": token },
                                                                      body: JSON.stringify(body) });
  check((await post("start", { config: {} })).status < 300, "a live run starts through the API");
  for (let s = 0; s < 50; s++) await post("ingest", { step: s, loss: 3 - s / 100 });
  await page.goto(`${url}static/run.html?run=live`);
  await drawn("loss");
  await page.waitForFunction(() => document.querySelector("#run-status").textContent === "running" && !document.querySelector("#halt").disabled,
                             null, { timeout: 10000 });
  page.on("dialog", (d) => (d.type() === "prompt" ? d.accept("wrong-token") : d.accept()));
  await page.click("#halt");
  await page.locator("#halt-message .message").waitFor({ timeout: 5000 });
  await page.evaluate(() => window.hlatDashboard.load());
  await page.waitForTimeout(1000);
  const message = await page.locator("#halt-message").innerText();
  const inHeader = await page.locator("header #halt-message .message").count();
  check(/Halt refused/.test(message) && inHeader === 1, `a refused halt says so beside the button, and stays (${message.replace("\n", " ")})`);
  await page.click("#halt-message .dismiss");
  check(await page.locator("#halt-message .message").count() === 0, "until dismissed");

  server.kill("SIGKILL");
  await page.waitForFunction(() => document.querySelector("#run-status").textContent.startsWith("disconnected — last heard"), null,
                             { timeout: 15000 });
  const stale = await page.evaluate(() => ({ status: document.querySelector("#run-status").textContent,
    halt: document.querySelector("#halt").disabled, why: document.querySelector("#halt").title,
    live: document.querySelector("#live").textContent }));
  check(/^disconnected — last heard \d\d:\d\d:\d\d$/.test(stale.status) && stale.halt && /does not answer/.test(stale.why),
        `with the server killed: "${stale.status}", Halt off ("${stale.why}"), "${stale.live}"`);
  await page.screenshot({ path: path.join(work, "disconnected.png") });
  await serve(port);
  await page.waitForFunction(() => document.querySelector("#run-status").textContent === "running" && !document.querySelector("#halt").disabled,
                             null, { timeout: 20000 });
  check(true, "the server back, the page says running again with Halt on");
  await post("ingest", { step: 50, loss: 2.4 });
  await page.waitForFunction(() => window.hlatDashboard.series.loss.steps.includes(50), null, { timeout: 10000 });
  check(true, "and the stream brings new points again");
}
