// End-to-end, in Debian's chromium: why an alert fired (issue 36). The real
// trainer, under `hlat run`, trains a tiny model on a generated corpus with
// a batch of random bytes planted at batch 150 and grad_spike's policy
// rewind_skip: the spike alert carries its attribution (the tensor that
// moved first, the batch's worst sequences with their documents), the run
// rewinds to a checkpoint at or before step 100 skipping that batch, and
// finishes. On the run page the alert has a one-line "Why", collapsed; opened,
// it names the tensor that moved first and shows the sequences: the planted
// document's id, its source and offset, the diagnostics, and the text as
// text (never HTML). The rewind is listed under its alert, drawn on the
// charts (a line at the restart step, hover says what it did) and on the
// uptime timeline. Screenshot: WORK_DIR/attribution.png.
// usage: node attribution.mjs HLAT_BINARY WORK_DIR
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const at = (f) => path.join(work, f);
const PLANTED = 150, RESTART_AT_MOST = 100;
const plantedId = `planted-random-batch-${PLANTED}`;

// A corpus of its own, the same on every machine (data/ is made by `make
// data` and is not in a checkout): 1,500 documents of a seeded made-up
// language whose words follow each other by a fixed table, so a small model
// learns it smoothly and the random batch is the only spike.
function corpus() {
  let seed = 36;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const syllables = ["ka", "lo", "mi", "ner", "tas", "pu", "ve", "dor", "sil", "an", "ri", "mo", "tek", "la", "fen",
                     "ost", "ba", "ur", "gi", "zel", "pra", "nu", "cho", "em"];
  const words = Array.from({ length: 300 }, () => Array.from({ length: 1 + Math.floor(rand() * 3) }, () => pick(syllables)).join(""));
  const next = words.map(() => Array.from({ length: 4 }, () => Math.floor(rand() * words.length)));
  const sentence = () => {
    let w = Math.floor(rand() * words.length);
    const out = [];
    for (let k = 0, n = 5 + Math.floor(rand() * 10); k < n; k++) { out.push(words[w]); w = next[w][Math.floor(rand() * 4)]; }
    return out.join(" ").replace(/^./, (c) => c.toUpperCase()) + ".";
  };
  const paragraph = () => Array.from({ length: 2 + Math.floor(rand() * 4) }, sentence).join(" ");
  return Array.from({ length: 1500 }, (_, d) =>
    JSON.stringify({ id: `note-${d}`, text: Array.from({ length: 1 + Math.floor(rand() * 4) }, paragraph).join("\n\n") }))
    .join("\n") + "\n";
}
writeFileSync(at("corpus.jsonl"), corpus());
writeFileSync(at("config.json"), JSON.stringify({
  model: { vocab_size: 512, dim: 64, n_layers: 2, n_heads: 2, n_kv_heads: 2, hidden_dim: 192, max_seq_len: 64 },
  schedule: { max_lr: 3e-3, min_lr: 3e-4, warmup_steps: 20, total_steps: 300 },
  data: { corpus: [at("corpus.jsonl")], tokenizer: at("tokenizer.model") },
  run: { batch_size: 8, seq_len: 64, threads: 2, log_every: 50, eval_every: 0, checkpoint_every: 50 },
  detectors: { grad_spike: { policy: "rewind_skip" }, rewind: { min_steps_back: PLANTED - RESTART_AT_MOST } },
}, null, 2));
const tokenizer = spawnSync(hlat, ["tokenizer", "--config", at("config.json")], { encoding: "utf8" });
check(tokenizer.status === 0, `a 512-piece tokenizer is trained on the generated corpus ${tokenizer.status ? tokenizer.stderr : ""}`);
const store = at("hlat.db");
const trained = spawnSync(hlat, ["run", "--", "--config", at("config.json"), "--steps", "160",
                                 "--inject", `bad_batch@${PLANTED}:random:4`, "--store", store,
                                 "--out-dir", at("run"), "--name", "planted"], { encoding: "utf8" });
writeFileSync(at("train.log"), trained.stdout + trained.stderr);
check(trained.status === 0, `hlat run trains through the planted batch, rewinding once (exit ${trained.status}; ${at("train.log")})`);

const server = spawn(hlat, ["serve", "--store", store, "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
process.on("exit", () => server.kill());
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const get = (what) => fetch(`${url}api/v1/runs/planted/${what}`).then((r) => r.json());

// What the store says, to hold the page against.
const { alerts } = await get("alerts");
const alert = alerts.find((a) => a.kind === "grad_spike" &&
  a.data?.attribution?.batch?.top?.some((s) => s.documents?.some((d) => d.id === plantedId)));
const why = alert?.data?.attribution;
const planted = why?.batch.top.find((s) => s.documents.some((d) => d.id === plantedId));
const plantedDoc = planted?.documents.find((d) => d.id === plantedId);
check(Boolean(alert && why.moved_first && plantedDoc),
      `the spike is alerted with its attribution: ${alert ? `step ${alert.step}, moved first ${why.moved_first?.label}, ` +
       `${why.batch.top.length} sequences` : JSON.stringify(alerts.map((a) => `${a.kind}@${a.step}`))}`);
const { events } = await get("events");
const rewind = events.find((e) => e.kind === "rewind");
const restart = events.find((e) => e.kind === "restart" && e.time > (rewind?.time ?? Infinity));
check(Boolean(rewind && restart && restart.step <= RESTART_AT_MOST),
      `the run rewound (${rewind?.detail}) and restarted from step ${restart?.step}`);

const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${url}static/run.html?run=planted`);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0 && window.hlatDashboard.rewinds.length > 0,
                             null, { timeout: 15000 });
  const item = page.locator("#alerts > li", { has: page.locator("details.why") })
    .filter({ hasText: `step ${alert.step} · grad_spike` });
  const details = item.locator("details.why");

  // Collapsed: one line, nothing of the table built yet.
  const collapsed = await details.evaluate((d) => ({ open: d.open, summary: d.querySelector("summary").innerText,
                                                     height: d.getBoundingClientRect().height, tables: d.querySelectorAll("table").length }));
  check(!collapsed.open && collapsed.tables === 0 && collapsed.height < 40,
        `the alert's "Why" is one collapsed line (${Math.round(collapsed.height)} px): "${collapsed.summary}"`);
  check(collapsed.summary.includes(`moved first: ${why.moved_first.label}`) && collapsed.summary.includes(plantedId),
        "which names the tensor that moved first and the planted document");

  // Opened: the tensor that moved first, and the sequences.
  await details.locator("summary").click();
  const moved = await details.locator(".why-moved").innerText();
  const ratio = why.moved_first.ratio === "inf" ? "went non-finite" : `${why.moved_first.ratio.toFixed(1)}× its median`;
  check(moved.startsWith(`moved first: ${why.moved_first.label} (${ratio}, step ${why.moved_first.step}`),
        `opened, it says "${moved.split(";")[0]}"`);
  const rows = await details.locator("table.why-sequences tbody tr").evaluateAll((trs) => trs.map((tr) => ({
    cells: [...tr.cells].map((td) => td.innerText.trim()),
    pre: tr.querySelector("pre.why-text"),
  })).map(({ cells, pre }) => ({ cells, text: pre?.textContent, children: pre?.children.length })));
  const headers = await details.locator("table.why-sequences th").allInnerTexts();
  check(rows.length === why.batch.top.length, `a row per top sequence (${rows.length}): ${headers.join(" | ")}`);
  const col = (name) => headers.indexOf(name);
  const i = why.batch.top.indexOf(planted);
  const row = rows[i];
  check(row?.cells[col("document")].includes(plantedId), `the planted sequence's row names its document: ${row?.cells[col("document")]}`);
  const sourceOffset = `${plantedDoc.source}:${plantedDoc.offset}`;
  check(row?.cells[col("source:offset")].replace(/\s+/g, " ") === sourceOffset,
        `and its source and offset: ${row?.cells[col("source:offset")]}`);
  check(sourceOffset.startsWith("--inject bad_batch (kind random, batch 150") && plantedDoc.offset === 0,
        `(the source is the injection, offset 0: ${sourceOffset})`);
  check(row?.cells[col("loss")] === `${planted.loss.toFixed(2)} #${planted.loss_rank}` &&
        row?.cells[col("grad norm")] === `${planted.grad_norm.toFixed(2)} #${planted.grad_rank}` &&
        row?.cells[col("rank · micro · row")] === `${planted.rank} · ${planted.micro} · ${planted.row}`,
        `its loss, gradient norm (with their ranks) and place: ${row?.cells.slice(0, 3).join(" | ")}`);
  check(row?.cells[col("4-gram repeats")] === `${(100 * planted.repeated_ngrams).toFixed(1)}%` &&
        row?.cells[col("byte entropy")] === planted.byte_entropy.toFixed(2) && row?.cells[col("duplicate of")] === "—",
        `its diagnostics: ${row?.cells.slice(col("4-gram repeats"), col("duplicate of") + 1).join(" | ")}`);
  check(row?.text === planted.preview && row?.children === 0,
        `the text the model saw is shown as text, exactly (${planted.preview.length} characters, no elements)`);
  const box = await details.locator("pre.why-text").first().evaluate((pre) => {
    const s = getComputedStyle(pre);
    return { whiteSpace: s.whiteSpace, overflow: s.overflowY, font: s.fontFamily };
  });
  check(box.whiteSpace === "pre-wrap" && box.overflow === "auto" && /mono/.test(box.font),
        `in a monospace, whitespace-keeping, scrollable box (${JSON.stringify(box)})`);

  // The rewind: under its alert, on the charts, on the uptime timeline.
  const label = `rewind: skipped the batches of step ${alert.step}`;
  const line = await item.locator(".rewind").innerText();
  check(line.includes(label) && line.includes(`restarted from step ${restart.step}`), `the rewind is listed under its alert: "${line}"`);
  const drawn = await page.evaluate(() => {
    const d = window.hlatDashboard, u = d.charts.loss, r = d.rewinds[0];
    const px = Math.round(u.valToPos(r.restartedAt, "x", true));
    const data = u.ctx.getImageData(px - 2, u.bbox.top, 5, u.bbox.height).data;
    let purple = 0;
    for (let k = 0; k < data.length; k += 4)
      if (Math.abs(data[k] - 0x82) < 24 && Math.abs(data[k + 1] - 0x50) < 24 && Math.abs(data[k + 2] - 0xdf) < 24) purple++;
    return { purple, label: r.label };
  });
  check(drawn.purple > 10, `the loss chart draws the rewind at step ${restart.step} (${drawn.purple} of its pixels)`);
  const chart = page.locator('.chart[data-panel="loss"]');
  await chart.scrollIntoViewIfNeeded();
  const over = await page.evaluate(() => {
    const d = window.hlatDashboard, u = d.charts.loss, rect = u.over.getBoundingClientRect();
    return { x: rect.left + u.valToPos(d.rewinds[0].restartedAt, "x"), y: rect.top + rect.height / 2 };
  });
  await page.mouse.move(over.x, over.y);
  const tip = await chart.locator(".alert-tip").innerText();
  check(tip === drawn.label, `hovering it says "${tip}"`);
  const tick = await page.locator("#uptime .event.rewind").getAttribute("title");
  check(tick?.includes(label), `the uptime timeline has a tick for it: "${tick}"`);
  // Its training stretches are the server's (the ones its uptime ratio counts): one before the rewind, one after.
  const { uptime } = await get("events");
  const segments = await page.locator("#uptime .segment").count();
  check(uptime.segments.length === 2 && segments === uptime.segments.length,
        `the timeline draws the server's ${uptime.segments.length} training stretches (${segments})`);

  // A reload of the data (a zoom, live points) keeps the "Why" open.
  await page.evaluate(() => window.hlatDashboard.load());
  check(await details.evaluate((d) => d.open), "the open \"Why\" stays open when the page reloads its data");

  await details.scrollIntoViewIfNeeded();
  await details.evaluate((d) => d.scrollIntoView({ block: "center" }));
  await page.screenshot({ path: at("attribution.png") });

  // Untrusted text stays text; the other shapes an attribution takes.
  const shapes = await page.evaluate(async () => {
    const { whySection } = await import("/static/attribution.js");
    const evil = "<img src=x onerror=\"window.pwned=1\"><b>bold</b>\n  indented";
    const seq = { rank: 0, micro: 0, row: 0, batch: 1, loss: 1, grad_norm: 1, loss_rank: 1, grad_rank: 1,
                  documents: [{ document: 1, id: "<i>doc</i>", source: "<script>x</script>", offset: 7, first_token: 0, tokens: 9 }],
                  preview: evil, repeated_ngrams: 0.5, byte_entropy: 1, duplicate_of: "<u>first</u>" };
    const sections = [
      { step: 5, data: { attribution: { batch: { step: 5, sequences: 1, mean_loss: 1, mean_grad_norm: 1, top: [seq] } } } },
      { step: 5, data: { attribution: { moved_first: { key: "k", step: 3, label: "<em>t</em>", ratio: "inf", moved: true, top: [] } } } },
      { step: 5, data: { attribution: { moved_first: { key: "k", step: 5, label: "lm_head", ratio: 1.4, moved: false, top: [] } } } },
      { step: 5, data: { flight_recorder: { first_step: 0, last_step: 5 } } },
    ].map((a) => whySection(a, { open: true }));
    const box = document.createElement("div");
    box.append(...sections.filter(Boolean));
    document.body.append(box);
    await new Promise((r) => setTimeout(r, 100));
    const out = {
      pwned: window.pwned === 1, elements: box.querySelectorAll("img, script, i, u, em, pre b").length,
      pre: box.querySelector("pre.why-text")?.textContent, none: sections[3], texts: sections.slice(0, 3).map((s) => s.innerText),
    };
    box.remove();
    return out;
  });
  check(!shapes.pwned && shapes.elements === 0 && shapes.pre === "<img src=x onerror=\"window.pwned=1\"><b>bold</b>\n  indented",
        "a preview, id, source or label holding HTML is shown as its characters, whitespace kept, never parsed");
  check(shapes.texts[0].includes("<i>doc</i>") && shapes.texts[0].includes("<script>x</script>:7") &&
        !shapes.texts[0].includes("moved first"), "a batch without moved_first (another trainer's) shows its sequences only");
  check(shapes.texts[1].includes("moved first: <em>t</em> (went non-finite, step 3, 2 before the alert)"),
        `a tensor that went non-finite first says so: "${shapes.texts[1].split("\n")[0]}"`);
  check(shapes.texts[2].includes("no tensor moved past 3× its median") && shapes.none === null,
        "none moved: said so, with the largest; an alert without attribution has no \"Why\"");
  check(errors.length === 0, `no page errors (${errors.join("; ")})`);
} catch (e) {
  check(false, `browser session: ${e.message}`);
} finally {
  await browser.close();
}
console.log(`screenshot in ${at("attribution.png")}`);
finish();
