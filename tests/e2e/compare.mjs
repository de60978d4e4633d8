// End-to-end, in Debian's chromium: the compare view and the runs list
// (issue 37). Twelve imported runs, each with gradient-norm spikes (alert
// episodes), one with an Inf and one whose loss ends NaN: a grid of three
// metrics draws every run in its own colour (palette.js, the same in every
// chart) with alert markers and non-finite marks; the legend hides a run in
// every chart; log y; no config table for runs that have no config; the page
// no wider than the window; runs chosen by checkbox in the runs list open
// compare; a tag edit refused for its token keeps its text and message across
// the list's refresh; the NaN run is "diverged", in red. Times the grid's
// first draw (median of 5).
// usage: node compare.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const token = "e2e-token-0123456789abcdef";
const here = path.dirname(fileURLToPath(import.meta.url));
const PALETTE = [...readFileSync(path.join(here, "../../web/static/palette.js"), "utf8").matchAll(/"(#[0-9a-f]{6})"/g)]
  .map((m) => m[1]);
const RUNS = Array.from({ length: 12 }, (_, i) => `cmp-${String(i).padStart(2, "0")}`);
const STEPS = 400, INF_RUN = "cmp-05", NAN_RUN = "cmp-11";

let seed = 11;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
function log(i) {
  const lines = [];
  for (let s = 0; s < STEPS; s++) {
    const loss = RUNS[i] === NAN_RUN && s >= STEPS - 20 ? "NaN" : (1.5 + 0.05 * i + 4 * Math.exp(-s / 150) + 0.02 * rand()).toFixed(5);
    const spike = s === 100 + 10 * i || s === 101 + 10 * i;
    const grad = RUNS[i] === INF_RUN && s === 250 ? "Infinity" : (spike ? 9 : 1 + 0.05 * rand()).toFixed(5);
    lines.push(`{"step": ${s}, "time": ${1.7e9 + s}, "loss": ${loss}, "grad_norm": ${grad}, "lr": ${3e-4 * Math.min(1, (s + 1) / 50)}}`);
  }
  return lines.join("\n") + "\n";
}
RUNS.forEach((name, i) => {
  const file = path.join(work, `${name}.jsonl`);
  writeFileSync(file, log(i));
  const ingest = spawnSync(hlat, ["ingest", "--store", store, "--run", name, file], { encoding: "utf8" });
  check(ingest.status === 0, `${name} ingests ${ingest.status ? ingest.stderr : ""}`);
});

const browser = await launchChromium();
const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", token], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill());
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const KEYS = ["loss", "grad_norm", "lr"];
const compareUrl = `${url}static/compare.html?runs=${RUNS.join(",")}&key=${KEYS.join(",")}`;
const grid = (page) => page.waitForFunction((n) => window.hlatCompare?.draws > 0 && Object.keys(window.hlatCompare.charts).length === n,
                                            KEYS.length, { timeout: 20000 });

// Each run's line colour in each chart: the stroke of the series labelled with its name.
const strokes = () => Object.fromEntries(Object.entries(window.hlatCompare.charts).map(([key, u]) => [key,
  u.series.map((s, i) => ({ label: s.label, stroke: typeof s.stroke === "function" ? s.stroke(u, i) : s.stroke }))
    .filter((s) => /^cmp-\d+$/.test(s.label)).map((s) => `${s.label}=${s.stroke}`)]));

// Whether the canvas at an episode marker (3 px into its triangle, in the 26 px above the plot) is the run's colour.
const markerPixels = () => Object.entries(window.hlatCompare.charts).map(([key, u]) => {
  const episodes = u.hlat.marks.filter((m) => m.what === "episode");
  const bad = episodes.filter((m) => {
    const pr = devicePixelRatio, slot = [...new Set(episodes.map((e) => e.run))].indexOf(m.run);
    const px = u.ctx.getImageData(Math.round(m.x * pr), Math.round(u.bbox.top + (2 + 5 * (slot % 4) + 3 - 26) * pr), 1, 1).data;
    const want = [1, 3, 5].map((k) => parseInt(m.color.slice(k, k + 2), 16));
    return Math.abs(px[0] - want[0]) + Math.abs(px[1] - want[1]) + Math.abs(px[2] - want[2]) > 40;
  });
  return { key, runs: new Set(episodes.map((m) => m.run)).size, bad: bad.map((m) => `${m.run}@${m.step}`) };
});

async function compareGrid(page) {
  await page.goto(compareUrl);
  await grid(page);
  const lines = await page.evaluate(strokes);
  const first = lines.loss;
  const colours = new Set(first.map((l) => l.split("=")[1]));
  check(first.length === 12 && colours.size === 12, `12 runs drawn in 12 distinct colours (${[...colours].join(" ")})`);
  check(first.every((l, i) => l === `${RUNS[i]}=${PALETTE[i]}`), "run i has palette.js's colour i");
  check(KEYS.every((k) => JSON.stringify(lines[k]) === JSON.stringify(first)), "and the same colour in every chart");
  const markers = await page.evaluate(markerPixels);
  check(markers.every((m) => m.runs >= 10 && m.bad.length === 0),
        `alert episodes are marked per run in every chart, in the run's colour (${markers.map((m) => `${m.key}: ${m.runs} runs ${m.bad}`).join("; ")})`);
  const marks = await page.evaluate(() => Object.fromEntries(Object.entries(window.hlatCompare.charts).map(([k, u]) =>
    [k, u.hlat.marks.filter((m) => m.what !== "episode").map((m) => `${m.run}:${m.what}@${m.step}`)])));
  check(marks.grad_norm.includes(`${INF_RUN}:inf@250`), `an Inf is marked where it is (${marks.grad_norm})`);
  check(marks.loss.some((m) => m.startsWith(`${NAN_RUN}:nan@`)), `a NaN is marked (${marks.loss.slice(0, 3)})`);
  const width = await page.evaluate(() => [document.documentElement.scrollWidth, innerWidth]);
  check(width[0] <= width[1], `the page is no wider than the window with 12 runs (${width[0]} <= ${width[1]})`);
  const sizes = await page.evaluate(() => Object.values(window.hlatCompare.charts).map((u) => u.width));
  check(sizes.every((w) => w >= 500), `the charts are not squeezed (${sizes} px wide)`);
  const diff = await page.evaluate(() => ({ table: !document.querySelector("#diff").hidden, note: document.querySelector("#diff-note").textContent }));
  check(!diff.table && !/identical/.test(diff.note), `runs without a config get no config table ("${diff.note}")`);
  const u = await page.evaluate(() => {
    const u = window.hlatCompare.charts.grad_norm, m = u.hlat.marks.find((k) => k.what === "episode" && k.run === "cmp-04");
    return { left: u.over.getBoundingClientRect().left, top: u.over.getBoundingClientRect().top, x: m.x - u.bbox.left / devicePixelRatio };
  });
  await page.mouse.move(u.left + u.x, u.top + 40);
  const readout = await page.locator('.chart[data-key="grad_norm"] .readout').innerText();
  check(readout.includes("cmp-04: 9") && /⚠ cmp-04: grad_spike/.test(readout),
        `hovering a spike reads each run's value and the episode under the cursor (${readout.split("\n").filter((l) => l.includes("cmp-04")).join(" / ")})`);
  await page.screenshot({ path: path.join(work, "compare.png"), fullPage: false });
}

// The legend hides a run's line, envelope and marks in every chart, and shows it again.
async function legendToggle(page) {
  const hidden = "cmp-03";
  const shownIn = () => Object.values(window.hlatCompare.charts).map((u) =>
    u.series.filter((s, i) => u.hlat.owner[i]?.name === "cmp-03" && s.show).length +
    u.hlat.marks.filter((m) => m.run === "cmp-03").length);
  await page.click(`#legend button[data-run="${hidden}"]`);
  const off = await page.evaluate(shownIn);
  const others = await page.evaluate(() => Object.values(window.hlatCompare.charts).every((u) =>
    u.series.filter((s, i) => u.hlat.owner[i] && u.hlat.owner[i].name !== "cmp-03").every((s) => s.show)));
  check(off.every((n) => n === 0) && others, `a legend click hides the run in every chart, marks included (${off})`);
  check(page.url().includes(`hide=${hidden}`), "and the link says so");
  await page.click(`#legend button[data-run="${hidden}"]`);
  const on = await page.evaluate(shownIn);
  check(on.every((n) => n >= 3), `a second click shows it again (${on})`);
}

// A drag-zoom in one chart zooms every chart to the same steps.
async function zoomTogether(page) {
  const box = await page.locator('.chart[data-key="loss"] .u-over').boundingBox();
  await page.mouse.move(box.x + box.width * 0.25, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  const ranges = await page.evaluate(() => Object.values(window.hlatCompare.charts).map((u) => `${u.scales.x.min.toFixed(0)}-${u.scales.x.max.toFixed(0)}`));
  check(new Set(ranges).size === 1 && ranges[0] !== `0-${STEPS - 1}`, `a drag-zoom zooms every chart alike (${ranges})`);
}

async function logY(page) {
  await page.check("#log");
  await page.waitForFunction(() => Object.values(window.hlatCompare.charts).length === 3 &&
    Object.values(window.hlatCompare.charts).every((u) => u.scales.y.distr === 3), null, { timeout: 10000 });
  const ranges = await page.evaluate(() => Object.values(window.hlatCompare.charts).map((u) => [u.scales.y.min, u.scales.y.max]));
  check(ranges.every(([lo, hi]) => lo > 0 && hi > lo && hi / lo < 1e3),
        `log y in every chart, fitted to the data (${ranges.map((r) => r.map((v) => v.toPrecision(2)).join("..")).join(", ")})`);
  check(page.url().includes("log=1"), "log y is in the link");
  await page.screenshot({ path: path.join(work, "compare-log.png"), fullPage: false });
  await page.uncheck("#log");
}

// Timed as the runs list opens it: no metric named, so loss, grad_norm and lr.
async function firstDraw(page) {
  const times = [];
  for (let i = 0; i < 5; i++) {
    await page.goto(`${url}static/compare.html?runs=${RUNS.join(",")}`);
    await grid(page);
    times.push(await page.evaluate(() => window.hlatCompare.firstDrawMs));
  }
  times.sort((a, b) => a - b);
  console.log(`first draw of 12 runs x 3 metrics: median ${times[2].toFixed(0)} ms (${times.map((t) => t.toFixed(0)).join(", ")})`);
  // No limit on the time here (tests carry no wall-clock limits): the page must report its first draw.
  check(times.every((t) => Number.isFinite(t) && t > 0), `the grid reports its first draw (median ${times[2].toFixed(0)} ms)`);
}

// Filter, "select all shown", untick one, compare: the compare view gets exactly those runs.
async function pickFromList(page) {
  await page.goto(url);
  await page.locator("#runs tbody tr").first().waitFor({ timeout: 10000 });
  await page.fill("#filter", "cmp-0");
  await page.click("#select-shown");
  await page.uncheck('#runs tbody input[value="cmp-04"]');
  const label = await page.locator("#compare").innerText();
  check(label === "Compare 9 selected", `"select all shown" picks the filtered rows (${label})`);
  await Promise.all([page.waitForURL(/compare\.html/), page.click("#compare")]);
  await page.waitForFunction(() => window.hlatCompare?.draws > 0, null, { timeout: 20000 });
  const names = await page.evaluate(() => window.hlatCompare.runs.map((r) => r.name).sort().join());
  const want = RUNS.filter((n) => n < "cmp-10" && n !== "cmp-04").join();
  check(names === want, `and compare opens with those runs (${names})`);
}

// A refused edit keeps what was typed and its message past the list's 5 s refresh.
async function refusedEdit(page) {
  await page.goto(url);
  await page.locator("#runs tbody tr").first().waitFor({ timeout: 10000 });
  const row = page.locator('#runs tbody tr[data-run="cmp-02"]');
  await row.locator("button[title='edit tags and note']").click();
  const editor = page.locator('#runs tbody tr.editor[data-run="cmp-02"]');
  await editor.locator("input").nth(0).fill("bf16, seed-2");
  await editor.locator("input").nth(1).fill("the one with the early spike");
  await editor.locator("input").nth(2).fill("not-the-token");
  const reply = page.waitForResponse((r) => r.url().endsWith("/annotate"));
  await editor.getByRole("button", { name: "Save" }).click();
  const status = (await reply).status();
  await page.waitForTimeout(6500);  // past a refresh of the list
  const kept = await editor.locator("input").evaluateAll((inputs) => inputs.map((i) => i.value));
  const said = await editor.locator(".edit-message").innerText();
  check((status === 401 || status === 403) && kept[0] === "bf16, seed-2" && kept[1] === "the one with the early spike",
        `a refused edit (HTTP ${status}) keeps its text across a refresh (${kept.slice(0, 2).join(" | ")})`);
  check(/Not saved/.test(said), `and its message next to the row ("${said}")`);
  await editor.locator("button.dismiss").click();
  check(await editor.locator(".edit-message").innerText() === "", "until dismissed");
  await editor.locator("input").nth(2).fill(token);
  await editor.getByRole("button", { name: "Save" }).click();
  await page.locator('#runs tbody tr[data-run="cmp-02"] .tag', { hasText: "seed-2" }).waitFor({ timeout: 10000 });
  check(await editor.count() === 0, "with the right token it saves and the editor closes");
}

async function diverged(page) {
  await page.goto(url);
  const cellOf = page.locator(`#runs tbody tr[data-run="${NAN_RUN}"] td.status`);
  await cellOf.waitFor({ timeout: 10000 });
  const [text, colour, ground] = await cellOf.evaluate((td) => [td.textContent, getComputedStyle(td).color,
                                                               getComputedStyle(td).backgroundColor]);
  const finished = await page.locator('#runs tbody tr[data-run="cmp-00"] td.status').evaluate((td) => [td.textContent, getComputedStyle(td).color]);
  check(text === "diverged" && colour === "rgb(179, 38, 30)" && finished[0] === "finished" && finished[1] !== colour,
        `a run whose loss ended NaN is "diverged", in red, unlike "finished" (${text} ${colour}; ${finished})`);
  // Red text on no background: the run page's red header badge must not reach the list (red on red).
  check(ground === "rgba(0, 0, 0, 0)", `on the list's own background, readable (${ground})`);
  await page.goto(compareUrl);
  await grid(page);
  const legend = await page.locator(`#legend li:has(button[data-run="${NAN_RUN}"]) .status`).evaluate((s) =>
    [s.textContent, getComputedStyle(s).color, getComputedStyle(s).backgroundColor]);
  check(legend.join() === "diverged,rgb(179, 38, 30),rgba(0, 0, 0, 0)", `and in compare's legend (${legend.join("; ")})`);
}

try {
  check(PALETTE.length >= 24 && new Set(PALETTE).size === PALETTE.length, `palette.js has ${PALETTE.length} distinct colours`);
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  page.on("pageerror", (e) => check(false, `no error in the page: ${e.message}`));
  for (const step of [compareGrid, legendToggle, zoomTogether, logY, firstDraw, pickFromList, refusedEdit, diverged]) {
    try {
      await step(page);
    } catch (e) {
      check(false, `${step.name}: ${e.message.split("\n")[0]}`);
    }
  }
} finally {
  await browser.close();
}
finish();
