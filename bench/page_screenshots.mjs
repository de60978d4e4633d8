// Makes the page screenshots the docs show: docs/dashboard.png (README.md,
// docs/api.md) and docs/compare.png (docs/api.md), from generated runs, so
// they can be retaken when the page changes.
//
// dashboard.png, the whole run page (it is short): "gpt-small-lr6e-4", 20,000
// steps of loss, grad_norm, lr and "attn_entropy/layer3" with a one-step
// grad-norm spike at 4,600 (a grad_spike alert, a thin peak of the envelope),
// a one-step loss spike at 7,200 (a loss_jump note, grey), a NaN in
// attn_entropy/layer3 at 11,000 and an Inf in grad_norm at 14,000 (each
// marked, a band from it on), then a grad norm climbing for 60 steps
// (sustained_grad_spike, divergence) and a loss and grad norm NaN from 18,600
// to the end: the header says "diverged at step 18,600" and the trainer's
// 1,400 "loss is NaN" alerts are one episode line in the alert list.
// compare.png, the viewport: the compare view of eight 20,000-step runs of an
// lr x seed sweep (palette.js's colours, the legend with each run's status
// and alert episodes, the config differences): one with a grad-norm spike
// episode, one with a loss_jump note, one with an Inf, one diverged.
//
// Builds a store in a temporary folder with `hlat ingest` of generated
// JSONL, serves it on 127.0.0.1 with a token, opens each page at 1600x1000
// in Debian's chromium (tests/e2e/harness.mjs), waits for the charts and
// screenshots it. Prints each PNG's size and any console error, then a JSON
// line: each PNG's bytes, width and height, and the console errors counted.
// About 10 s. --small checks the path: 2,000-step runs (the planted steps at
// the same fractions of the run), the PNGs in a temporary folder, removed.
// usage: node bench/page_screenshots.mjs build/cli/hlat [OUT_DIR (default docs) | --small]
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { launchChromium } from "../tests/e2e/harness.mjs";

const small = process.argv.includes("--small");
const [hlat, outArg] = process.argv.slice(2).filter((a) => a !== "--small");
if (!hlat || (small && outArg)) throw new Error("usage: node bench/page_screenshots.mjs HLAT_BINARY [OUT_DIR | --small]");
const here = path.dirname(fileURLToPath(import.meta.url));
const work = mkdtempSync(path.join(os.tmpdir(), "hlat_screenshots_"));
const out = small ? work : outArg ?? path.join(here, "../docs");  // --small never writes docs/
const store = path.join(work, "hlat.db");
const token = "screenshot-token-0123456789";
const STEPS = small ? 2000 : 20000;
const at = (step) => Math.round(step * STEPS / 20000);  // a step of the full run, in --small's shorter one
const started = Date.now();

let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const noise = () => rand() + rand() + rand() - 1.5;  // roughly normal, -1.5..1.5

// A run's records: an lr warmup and cosine decay, a loss falling to a floor
// set by lr and seed, a grad norm settling after the warmup, an attention
// entropy drifting; `plant` edits a step's record (spikes, NaN, Inf).
function run({ lr = 6e-4, floor = 2.9, plant = () => {} }) {
  const lines = [];
  const line = (r) => lines.push(JSON.stringify(r).replace(/"(NaN|Infinity|-Infinity)"/g, "$1"));
  for (let s = 0; s < STEPS; s++) {
    const warm = Math.min(1, (s + 1) / 1000);
    const r = { step: s, time: 1.76e9 + 0.31 * s,
                loss: floor + 7.8 * Math.exp(-s / 1500) + 0.35 * Math.exp(-s / 9000) + 0.03 * noise(),
                grad_norm: 0.28 + 1.6 * Math.exp(-s / 800) + 0.04 * noise(),
                lr: lr * warm * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * s / STEPS))),
                "attn_entropy/layer3": 2.1 + 0.9 * Math.exp(-s / 4000) + 0.02 * noise() };
    plant(s, r);
    line(r);
    // The trainer's own alert at every step whose loss is not finite, as a
    // trainer that checks each step logs it: hundreds, one episode on the page.
    // With the step's time: an alert line without one is stamped with the
    // import's wall clock, which stretches the page's uptime bar to today.
    if (r.loss === "NaN") line({ step: s, time: r.time, alert: "nan", text: "loss is NaN, skipping the optimizer step",
                                 level: "critical" });
  }
  return lines.join("\n") + "\n";
}
function ingest(name, text, config = {}) {
  const file = path.join(work, `${name.replace(/\W/g, "_")}.jsonl`);
  writeFileSync(file, text);
  const r = spawnSync(hlat, ["ingest", "--store", store, "--run", name, "--config", JSON.stringify(config), file],
                      { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`ingest of ${name} failed: ${r.stderr}`);
}

// The run page's run.
const MAIN = "gpt-small-lr6e-4", LOSS_SPIKE = at(7200), GRAD_SPIKE = at(4600), NAN_STEP = at(11000), INF_STEP = at(14000),
      DIVERGE = at(18600);
ingest(MAIN, run({ plant: (s, r) => {
  if (s === LOSS_SPIKE) r.loss += 3.1;
  if (s === GRAD_SPIKE) r.grad_norm = 4.7;
  if (s === NAN_STEP) r["attn_entropy/layer3"] = "NaN";
  if (s === INF_STEP) r.grad_norm = "Infinity";
  if (s >= DIVERGE - 60 && s < DIVERGE) r.grad_norm *= 1 + (s - DIVERGE + 60) / 6;
  if (s >= DIVERGE) { r.loss = "NaN"; r.grad_norm = "NaN"; }
} }), { model: "gpt-small", optimizer: { name: "adamw", lr: 6e-4, warmup_steps: 1000 }, seed: 1 });

// The sweep: lr x seed, each 20,000 steps.
const SWEEP = [];
[[3e-4, 3.02], [6e-4, 2.93], [1e-3, 2.88], [2e-3, 2.97]].forEach(([lr, floor]) => [1, 2].forEach((sd) => {
  const name = `sweep-lr${lr.toExponential(0)}-s${sd}`;
  const k = SWEEP.length;
  SWEEP.push(name);
  ingest(name, run({ lr, floor: floor + 0.015 * (sd - 1.5), plant: (s, r) => {
    if (k === 2 && s >= at(9000) && s < at(9040) && s % 4 === 0) r.grad_norm = 3.5 + rand();  // a spike episode
    if (k === 3 && s === at(5200)) r.loss += 2.4;
    if (k === 5 && s === at(12500)) r.grad_norm = "Infinity";
    if (k === 7 && s >= at(16000) && s < at(16200)) r.grad_norm *= 1 + (s - at(16000)) / 20;
    if (k === 7 && s >= at(16200)) { r.loss = "NaN"; r.grad_norm = "NaN"; }
  } }), { model: "gpt-small", optimizer: { name: "adamw", lr, warmup_steps: 1000 }, seed: sd });
}));

const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", token], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => { server.kill(); rmSync(work, { recursive: true, force: true }); });
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});

const browser = await launchChromium();
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
const errors = [];
page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") errors.push(`${m.type()}: ${m.text()}`); });
page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
// The viewport, or the whole page when it is short (the run page's alert list).
const shots = {};
const shot = async (name, fullPage = false) => {
  const file = path.join(out, name);
  await page.waitForTimeout(500);  // the last draw's paint
  await page.screenshot({ path: file, fullPage });
  const size = shots[path.parse(name).name] = pngSize(file);
  console.log(`${file}: ${size.bytes} bytes`);
};
// A PNG's bytes and its size in pixels (its IHDR chunk), refusing a file that is no PNG or not the page's width.
function pngSize(file) {
  const head = readFileSync(file).subarray(0, 24);
  if (head.toString("latin1", 1, 4) !== "PNG" || head.toString("latin1", 12, 16) !== "IHDR")
    throw new Error(`${file} is not a PNG`);
  const size = { bytes: statSync(file).size, width: head.readUInt32BE(16), height: head.readUInt32BE(20) };
  if (size.width !== 1600 || size.height < 1000) throw new Error(`${file} is ${size.width}x${size.height}, not the page`);
  return size;
}

try {
  const keys = ["loss", "grad_norm", "lr", "attn_entropy/layer3"];
  await page.goto(`${url}static/run.html?run=${MAIN}&keys=${encodeURIComponent(keys.join(","))}`);
  await page.waitForFunction((ks) => window.hlatDashboard?.drawn > 0 && ks.every((k) => window.hlatDashboard.charts[k] ||
    window.hlatDashboard.charts[`key:${k}`]) && window.hlatDashboard.alertEpisodes?.length > 0, keys, { timeout: 30000 });
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await shot("dashboard.png", height <= 1300);

  await page.goto(`${url}static/compare.html?runs=${SWEEP.join(",")}&key=loss,grad_norm,lr,${encodeURIComponent("attn_entropy/layer3")}`);
  await page.waitForFunction((n) => window.hlatCompare?.draws > 0 && Object.keys(window.hlatCompare.charts).length === n, 4,
                             { timeout: 30000 });
  await shot("compare.png");
} finally {
  await browser.close();
}
console.log(errors.length ? `console errors:\n  ${errors.join("\n  ")}` : "no console errors");
console.log(JSON.stringify({ steps: STEPS, runs: 1 + SWEEP.length, screenshots: shots, console_errors: errors.length,
                             seconds: (Date.now() - started) / 1000 }));
process.exit(0);
