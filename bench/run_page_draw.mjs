// The run page's first draw on the run issue 37 names: 20,000 steps of 13
// metrics (a one-step grad-norm spike, a custom key with a NaN and an
// infinity, an evaluation score every 1,000 steps), all 13 drawn. Builds
// the store with `hlat ingest`, serves it, and times the page with
// page_first_draw.mjs (median of 5 fresh loads, chromium). STATIC: the
// page's folder to serve (another revision's, to compare; default the
// server's own). Prints page_first_draw.mjs's JSON with the run's shape.
// --small checks the path in seconds: 2,000 steps, one page load.
// usage: node bench/run_page_draw.mjs HLAT_BINARY [STATIC] [--small]
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const small = process.argv.includes("--small");
const [hlat, staticDir] = process.argv.slice(2).filter((a) => a !== "--small");
const here = path.dirname(fileURLToPath(import.meta.url));
const work = mkdtempSync(path.join(os.tmpdir(), "hlat_page_draw_"));
const STEPS = small ? 2000 : 20000;
const LOADS = small ? 1 : 5;
const at = (step) => Math.round(step * STEPS / 20000);  // the full run's marked steps, in --small's shorter run
const KEYS = ["loss", "grad_norm", "lr", "step_s", "tokens_per_s", "heldout_loss", "train/custom", "eval/hellaswag",
              "train/m1", "train/m2", "train/m3", "train/m4", "train/m5"];

let seed = 5;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const lines = [];
for (let s = 0; s < STEPS; s++) {
  const r = { step: s, time: 1.7e9 + 0.25 * s, loss: 2 + 4 * Math.exp(-s / 3000) + 0.02 * rand(),
              grad_norm: s === at(8715) ? 4.29 : 0.3 + 0.02 * rand(), lr: 3e-4, step_s: 0.25 + 0.01 * rand(),
              tokens_per_s: 4e5 + 1e4 * rand(), "train/custom": s === at(12000) ? "NaN" : s === at(14000) ? "Infinity" : Math.sin(s / 1000) };
  for (let m = 1; m <= 5; m++) r[`train/m${m}`] = m + Math.cos(s / (500 * m)) + 0.1 * rand();
  if (s % 250 === 0) r.heldout_loss = r.loss + 0.1;
  if (s % 1000 === 999) r["eval/hellaswag"] = 0.25 + s / 100000;
  lines.push(JSON.stringify(r).replace(/"(NaN|Infinity)"/g, "$1"));
}
const log = path.join(work, "run.jsonl");
writeFileSync(log, lines.join("\n") + "\n");
const store = path.join(work, "hlat.db");
const ingest = spawnSync(hlat, ["ingest", "--store", store, "--run", "long", log], { encoding: "utf8" });
if (ingest.status !== 0) throw new Error(`ingest failed: ${ingest.stderr}`);

const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", "bench-token-0123456789",
                            ...(staticDir ? ["--static", staticDir] : [])], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => { server.kill(); rmSync(work, { recursive: true, force: true }); });
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const page = `${url}static/run.html?run=long&keys=${encodeURIComponent(KEYS.join(","))}`;
const timed = spawnSync("node", [path.join(here, "page_first_draw.mjs"), page, String(LOADS)], { encoding: "utf8" });
if (timed.status !== 0) throw new Error(`page_first_draw.mjs failed: ${timed.stderr}`);
const result = JSON.parse(timed.stdout.trim().split("\n").at(-1));
console.log(JSON.stringify({ steps: STEPS, metrics: KEYS.length, ...result }));
process.exit(0);  // the server would keep this process alive; "exit" stops it
