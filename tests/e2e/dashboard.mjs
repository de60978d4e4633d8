// End-to-end: Debian's chromium, driven headless by playwright-core, against
// `hlat serve` on a store with real runs. Checks the runs list, the loss chart,
// an injected alert's marker, checkpoint evaluations against tokens, a live
// point, and the halt button with and without the token; saves screenshots.
// usage: node dashboard.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const token = "e2e-token-0123456789abcdef";

// A small model on a noisy Markov stream: quick, learnable, never trivially so
// (a purely periodic stream would rightly trip the loss-floor detector).
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const ids = new Uint16Array(20000);
for (let i = 1, t = 0; i < ids.length; i++) {
  t = rand() < 0.8 ? (t * 7 + 1 + Math.floor(rand() * 3)) % 64 : Math.floor(rand() * 64);
  ids[i] = t;
}
writeFileSync(path.join(work, "t.u16"), Buffer.from(ids.buffer));
// No model internals here (e2e_heatmaps draws them): the live run must reach
// step 20,000 within a minute on 2 shared cores, and the heatmaps' refresh and
// the internals' cost per step of so small a model (4-9%) only slow it.
const config = (steps) => ({
  model: { vocab_size: 64, dim: 32, n_layers: 2, n_heads: 2, n_kv_heads: 2, hidden_dim: 64, max_seq_len: 32 },
  schedule: { warmup_steps: 10, total_steps: steps },
  run: { batch_size: 2, seq_len: 32, threads: 1, log_every: 100000, eval_every: 0, tensor_norms_every: 0,
         internals_every: 0 },
});
writeFileSync(path.join(work, "short.json"), JSON.stringify(config(120)));
writeFileSync(path.join(work, "long.json"), JSON.stringify(config(10000000)));
const train = (name, cfg, extra = []) => ["train", "--config", path.join(work, cfg), "--data", path.join(work, "t.u16"),
  "--out-dir", path.join(work, name), "--store", store, "--name", name, ...extra];

const done = spawnSync(hlat, train("finished-run", "short.json", ["--inject", "grad_spike@60:300"]), { encoding: "utf8" });
check(done.status === 0, "a short run with an injected gradient spike trains");

// Two distributed runs (mpirun, 2 ranks): tensor parallelism with stochastic
// rounding keyed by rank (its norm weights drift apart), and data parallelism
// with an all-reduce bug (its replicas disagree); warn only, so both finish.
const distributed = (extra) => ({
  ...config(40),
  ...extra,
  parallel: { check_every: 5 },
  detectors: { tp_drift: { policy: "warn" }, replica_mismatch: { policy: "warn" } },
});
writeFileSync(path.join(work, "tp.json"), JSON.stringify(distributed({ precision: { mode: "bf16_sr", sr_key_rank: true } })));
writeFileSync(path.join(work, "dp.json"), JSON.stringify(distributed({})));
const mpi = (args) => spawnSync("mpirun", ["--oversubscribe", "-np", "2", hlat, ...args], {
  encoding: "utf8", env: { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1" } });
const tpRun = mpi(train("tp-drift-run", "tp.json", ["--tp", "2"]));
check(tpRun.status === 0, `a TP=2 bf16_sr run trains under mpirun ${tpRun.status ? tpRun.stderr : ""}`);
const dpRun = mpi(train("dp-bug-run", "dp.json", ["--dp", "2", "--inject", "allreduce_bug@12:sum"]));
check(dpRun.status === 0, `a DP=2 run with an all-reduce bug trains under mpirun ${dpRun.status ? dpRun.stderr : ""}`);
const preflight = mpi(["preflight", "--store", store, "--name", "preflight-run", "--max-bytes", "65536",
  "--inject", "slow_rank:1:3"]);
check(preflight.status === 3, `a pre-flight with a slowed rank fails (exit ${preflight.status})`);

// A run on text with a tokenizer, its checkpoints scored by `hlat eval --watch`.
const words = "the model gradient norm spike loss step layer token attention mask rank checkpoint python".split(" ");
const docs = [];
for (let d = 0; d < 300; d++) {
  const n = 20 + Math.floor(rand() * 60);
  docs.push(JSON.stringify({ id: `doc-${d}`, text: Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ") + "." }));
}
writeFileSync(path.join(work, "corpus.jsonl"), docs.join("\n") + "\n");
writeFileSync(path.join(work, "text.json"), JSON.stringify({
  ...config(40),
  model: { ...config(40).model, vocab_size: 320 },  // byte fallback needs 256 + the rest
  data: { corpus: [path.join(work, "corpus.jsonl")], tokenizer: path.join(work, "tok.model") },
  run: { ...config(40).run, checkpoint_every: 10, keep_checkpoints: 0 },
}));
writeFileSync(path.join(work, "mc.jsonl"), [
  { context: "the model gradient", choices: ["norm spike.", "python", "loss step layer"], gold: 0 },
  { context: "attention mask", choices: ["rank", "token checkpoint."], gold: 1 },
].map((x) => JSON.stringify(x)).join("\n") + "\n");
writeFileSync(path.join(work, "ppl.jsonl"), JSON.stringify({ text: JSON.parse(docs[0]).text }) + "\n");
const tok = spawnSync(hlat, ["tokenizer", "--config", path.join(work, "text.json"), "--threads", "1"], { encoding: "utf8" });
check(tok.status === 0, `a tokenizer for the text run trains ${tok.status ? tok.stderr : ""}`);
const textRun = spawnSync(hlat, ["train", "--config", path.join(work, "text.json"), "--out-dir", path.join(work, "evaluated-run"),
  "--store", store, "--name", "evaluated-run"], { encoding: "utf8" });
check(textRun.status === 0, `a text run with checkpoints every 10 steps trains ${textRun.status ? textRun.stderr : ""}`);
const watched = spawnSync(hlat, ["eval", "--watch", path.join(work, "evaluated-run"), "--store", store, "--tasks",
  `${path.join(work, "mc.jsonl")},${path.join(work, "ppl.jsonl")}`, "--poll", "0.2", "--exit-when-done"],
  { encoding: "utf8", timeout: 120000 });
check(watched.status === 0 && watched.stdout.includes("scored 4 checkpoints"),
      `hlat eval --watch scores its 4 checkpoints ${watched.status ? watched.stdout + watched.stderr : ""}`);

const server = spawn(hlat, ["serve", "--store", store, "--port", "0", "--token", token]);
const url = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/open (http:\/\/\S+)/);
    if (m) resolve(m[1]);
  });
  server.on("exit", (code) => reject(new Error(`hlat serve exited with ${code}`)));
});
// Its output is not read: ignore it rather than let a full pipe stall the trainer.
const live = spawn(hlat, train("live-run", "long.json"), { stdio: "ignore" });
// However this script ends (a crash included), the trainer and server end with it.
process.on("exit", () => { live.kill("SIGKILL"); server.kill("SIGTERM"); });
let liveExit = null;
const liveExited = new Promise((resolve) => live.on("exit", (code) => { liveExit = code; resolve(code); }));

const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  await page.goto(url);
  await page.getByRole("link", { name: "finished-run" }).waitFor({ timeout: 10000 });
  check(true, "the runs list shows the run");
  // The trainer registers its run a moment after it starts; the list refreshes every 5 s.
  const liveListed = await page.getByRole("link", { name: "live-run" }).waitFor({ timeout: 15000 })
    .then(() => true, () => false);
  check(liveListed, "and the running one");

  await page.getByRole("link", { name: "finished-run" }).click();
  await page.waitForSelector('.chart[data-panel="loss"] canvas', { timeout: 10000 });
  const lossPoints = await page.evaluate(() => window.hlatDashboard.series.loss.steps.length);
  check(lossPoints === 120, `the loss chart has the run's points (${lossPoints})`);
  const alerts = await page.evaluate(() => window.hlatDashboard.alerts.map((a) => `${a.kind}@${a.step}`));
  check(alerts.includes("grad_spike@60"), `the injected spike is an alert marker (${alerts.join(", ")})`);
  check(await page.getByText(/step 60 · grad_spike/).isVisible(), "and is listed with its message");
  const episodes = await page.evaluate(() => window.hlatDashboard.episodes.length);
  check(episodes >= 1, `spike episodes are marked on the grad norm chart (${episodes})`);
  await page.screenshot({ path: path.join(work, "dashboard.png"), fullPage: true });

  await page.goto(`${url}static/run.html?run=tp-drift-run`);
  const driftPanel = '.chart[data-panel="tp_drift"] canvas';
  await page.waitForSelector(driftPanel, { timeout: 10000 });
  const drift = await page.evaluate(() => window.hlatDashboard.series.tp_drift.line);
  check(drift.length === 8 && Math.max(...drift) > 0, `the TP drift panel shows the drift every 5 steps (${drift})`);
  const header = await page.locator("#run-steps").innerText();
  check(header.includes("DP 1 × TP 2"), `the header names the layout (${header})`);
  await page.screenshot({ path: path.join(work, "tp-drift.png"), fullPage: true });
  await page.goto(`${url}static/run.html?run=dp-bug-run`);
  await page.waitForSelector('.chart[data-panel="replicas"] canvas', { timeout: 10000 });
  const mismatch = await page.evaluate(() => window.hlatDashboard.series.replica_mismatch.line.join(","));
  const bugAlerts = await page.evaluate(() => window.hlatDashboard.alerts.map((a) => `${a.kind}@${a.step}`));
  check(mismatch === "0,0,1,1,1,1,1,1" && bugAlerts.includes("replica_mismatch@14"),
        `the replica panel shows the replicas parting at the first check after the bug (${mismatch}; ${bugAlerts})`);
  await page.waitForSelector('.chart[data-panel="rank/compute_s"] canvas', { timeout: 10000 });
  const rankLines = await page.evaluate(() => {
    const p = window.hlatDashboard.rankPanels.find((r) => r.key === "rank/compute_s");
    return p ? p.series.slice(1).map((s) => `${s.label}:${p.data[1 + p.series.slice(1).indexOf(s)].filter((v) => v > 0).length}`) : [];
  });
  check(rankLines.join(",") === "rank 0:40,rank 1:40", `each rank's compute time is drawn per step (${rankLines})`);
  await page.screenshot({ path: path.join(work, "replicas.png"), fullPage: true });

  await page.goto(`${url}static/run.html?run=preflight-run`);
  await page.waitForSelector("#preflight table", { timeout: 10000 });
  const failedRows = await page.locator("#preflight tr.failed td:first-child").allInnerTexts();
  const preflightVerdict = await page.locator("#preflight .verdict").innerText();
  check(failedRows.join(",") === "1" && preflightVerdict.includes("FAILED"),
        `the pre-flight page marks the slowed rank (${failedRows}; ${preflightVerdict})`);
  await page.screenshot({ path: path.join(work, "preflight.png"), fullPage: true });

  await page.goto(`${url}static/run.html?run=evaluated-run`);
  await page.waitForSelector('.chart[data-panel="mc: accuracy"] canvas', { timeout: 10000 });
  const evalTokens = await page.evaluate(() => [...new Set(window.hlatDashboard.evals.filter((e) => e.task === "mc").map((e) => e.tokens))]);
  check(evalTokens.join(",") === "640,1280,1920,2560", `eval curves have a point per checkpoint, by tokens seen (${evalTokens})`);
  check(await page.locator('.chart[data-panel="held-out bits per byte (checkpoints)"] canvas').count() === 1,
        "held-out bits per byte is drawn next to the loss");
  await page.screenshot({ path: path.join(work, "evals.png"), fullPage: true });

  await page.goto(`${url}static/compare.html?runs=finished-run,live-run`);
  await page.waitForSelector("#chart canvas", { timeout: 10000 });
  const diff = await page.locator("#diff tbody").innerText();
  check(diff.includes("schedule.total_steps") && diff.includes("10000000"), "compare lists the config differences");
  await page.screenshot({ path: path.join(work, "compare.png"), fullPage: true });
  const [report] = await Promise.all([page.waitForEvent("popup"), page.click("#report")]);
  await report.waitForLoadState();
  check((await report.locator("svg").count()) > 0 && (await report.content()).includes("live-run"),
        "compare links to the post-mortem report of the same runs");
  await report.screenshot({ path: path.join(work, "report.png"), fullPage: true });
  await report.close();

  await page.goto(`${url}static/run.html?run=live-run`);
  await page.waitForSelector('.chart[data-panel="loss"] canvas', { timeout: 15000 });
  const before = await page.evaluate(() => Math.max(...window.hlatDashboard.series.loss.steps));
  await page.waitForFunction((b) => Math.max(...window.hlatDashboard.series.loss.steps) > b + 5, before,
                             { timeout: 10000 });
  check(true, "points written while the page is open arrive live");
  // A page left open on a fast run must not grow without bound: old charts are
  // destroyed (uPlot's cursor sync group would otherwise hold each one and its
  // data) and the live points are fetched again as buckets.
  await page.waitForFunction(() => window.hlatDashboard.drawn > 10 && window.hlatDashboard.lastStep > 20000, null,
                             { timeout: 60000 });
  const live = await page.evaluate(() => ({
    synced: uPlot.sync("hlat-run").plots.length,
    charts: Object.keys(window.hlatDashboard.charts).filter((k) => !k.startsWith("eval:")).length,
    points: window.hlatDashboard.series.loss.steps.length,
    last: window.hlatDashboard.lastStep,
  }));
  check(live.synced === live.charts && live.points < live.last / 2,
        `a live page keeps only its charts (${live.synced} synced, ${live.charts} drawn) and re-buckets ` +
        `(${live.points} loss points for ${live.last} steps)`);

  // A key outside the default layout, picked while the run is live, is drawn
  // and joins the live stream, even when a re-bucketing load that began before
  // the pick answers after it: that load's series are held here until the
  // pick's own load has drawn, then let through.
  const held = [];
  let firstHeld;
  const holding = new Promise((resolve) => { firstHeld = resolve; });
  await page.route((u) => u.pathname.endsWith("/series"), (route) => {
    if (!firstHeld) return route.continue();
    held.push(route);
    firstHeld();
  });
  const overtakenLoad = page.evaluate(() => window.hlatDashboard.load());
  overtakenLoad.catch(() => {});  // awaited below; until then a failure must not crash the script
  await Promise.race([holding, overtakenLoad]);
  firstHeld = null;
  await page.click("#picker summary");
  await page.check('#picker input[value="step_s"]');
  await page.waitForFunction(() => window.hlatDashboard.streamedKeys().includes("step_s") &&
                             window.hlatDashboard.series.step_s?.steps.length > 0, null, { timeout: 20000 });
  await Promise.all(held.map((route) => route.continue()));
  await overtakenLoad;
  await page.unrouteAll();
  check(await page.evaluate(() => window.hlatDashboard.series.step_s?.steps.length > 0),
        "a load overtaken by the pick does not take the picked metric away");
  const picked = await page.evaluate(() => window.hlatDashboard.series.step_s.steps.at(-1));
  await page.waitForFunction((p) => window.hlatDashboard.series.step_s.steps.at(-1) > p, picked, { timeout: 20000 });
  check(true, "a metric picked while the run is live is drawn and streamed");
  await page.click("#picker summary");

  let answer = "wrong-token";
  let question = "";
  page.on("dialog", (d) => {
    if (d.type() === "confirm") question = d.message();
    return d.type() === "prompt" ? d.accept(answer) : d.accept();
  });
  await page.click("#halt");
  await page.getByText(/Halt refused/).waitFor({ timeout: 5000 });
  check(question.includes("halts after its current step and saves a checkpoint"),
        `the halt button says what a halt does to hlat's trainer ("${question}")`);
  check(liveExit === null, "the halt button without the token is refused and the trainer runs on");
  answer = token;
  await page.click("#halt");
  await page.getByText(/Halt requested/).waitFor({ timeout: 5000 });
  const code = await Promise.race([liveExited, new Promise((r) => setTimeout(() => r("timeout"), 15000))]);
  check(code === 3, `with the token the trainer halts (exit ${code})`);
  await page.waitForFunction(() => document.querySelector("#run-status").textContent === "halted", null,
                             { timeout: 5000 });
  check(true, "and the page shows it halted");
  await page.screenshot({ path: path.join(work, "dashboard-live.png"), fullPage: true });
} catch (e) {
  check(false, `browser session: ${e.message}`);
} finally {
  await browser.close();
}
console.log(`screenshots in ${work}`);
finish();
