// Why an alert fired (issue 36), under the alert in the run page's list: the
// tensor that moved first and the sequences of the alert's batch with the
// highest loss or gradient, each with its documents, a few data diagnostics
// and the text the model saw. One line, collapsed; its table is built when
// first opened. And a rewind_skip's "rewind" event in words.
//
// Everything here is data from the trainer and from the corpus, the text
// previews above all: it goes into the page as text nodes only, never as HTML.

// el("td", { className: "x", title: "..." }, "text", child, ...)
function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

const isNumber = (v) => typeof v === "number" && Number.isFinite(v);

// Losses and norms: two decimals, three significant digits when large.
function num(v) {
  if (v === "inf" || v === "-inf") return v === "inf" ? "∞" : "−∞";
  if (!isNumber(v)) return "—";
  return Math.abs(v) >= 1000 ? v.toPrecision(3) : v.toFixed(2);
}

// A tensor's value over its median: "29.6× its median", or non-finite.
function ratio(r) {
  return r === "inf" ? "went non-finite" : isNumber(r) ? `${r.toFixed(1)}× its median` : "";
}

const steps = (list) => (list.length > 1 ? `steps ${list[0]}–${list.at(-1)}` : `step ${list[0]}`);

// What the collapsed line says: the tensor that moved first and the sequence
// with the highest loss, in one sentence.
function summary(why) {
  const parts = [];
  const m = why.moved_first;
  if (m) parts.push(m.moved ? `moved first: ${m.label} (${ratio(m.ratio)})` : `no tensor moved past 3× its median`);
  const first = why.batch?.top?.[0];
  if (first) {
    const doc = first.documents?.[0];
    parts.push(`top sequence: ${doc ? doc.id : "no document recorded"} (loss ${num(first.loss)}, ` +
               `batch mean ${num(why.batch.mean_loss)})`);
  }
  return parts.join(" · ");
}

// "moved first: LABEL (29.6× its median, step 150)", then the runners-up.
function movedFirst(m, alertStep, titleOf) {
  const what = titleOf(m.key);
  const when = m.step === alertStep ? `step ${m.step}` : `step ${m.step}, ${alertStep - m.step} before the alert`;
  const p = el("p", { className: "why-moved" });
  if (m.moved) {
    p.append("moved first: ", el("b", { className: "why-label", textContent: m.label }),
             ` (${ratio(m.ratio)}, ${when})`);
  } else {
    p.append(`no tensor moved past 3× its median; the largest at ${when}: `,
             el("b", { className: "why-label", textContent: m.label }), ` (${ratio(m.ratio)})`);
  }
  const rest = (m.top ?? []).filter((t) => t.label !== m.label);
  const times = (r) => (r === "inf" ? "non-finite" : isNumber(r) ? `${r.toFixed(1)}×` : "");
  if (rest.length) p.append(`; then ${rest.map((t) => `${t.label} ${times(t.ratio)}`).join(", ")}`);
  p.append(el("span", { className: "why-hint", textContent: ` · ${what}` }));
  return p;
}

// The top sequences: one row each, the text the model saw on the right.
const COLUMNS = [
  ["loss", "the sequence's loss (mean over its tokens), and its rank among the batch's sequences (#1: the highest)"],
  ["grad norm", "the norm of the sequence's own gradient, and its rank among the batch's sequences"],
  ["rank · micro · row", "where it sat: data-parallel rank, micro-batch, row of the micro-batch"],
  ["document", "the document(s) packed into the sequence, by id; hover for its tokens in this sequence"],
  ["source:offset", "the file the document was read from and its record's byte offset there"],
  ["4-gram repeats", "share of the sequence's token 4-grams that occurred earlier in it: ~0% for prose, near 100% for one phrase over and over"],
  ["byte entropy", "bits per byte of the text: ~4.5 for English prose, near 0 for one repeated character, near 8 for random bytes"],
  ["duplicate of", "an earlier document with the same text, if any"],
  ["text the model saw", "the start of the sequence's text, decoded from its tokens"],
];

function sequenceRow(s) {
  const docs = s.documents ?? [];
  const byDoc = (f) => (docs.length ? docs.map(f) : ["—"]);
  const tokens = (d) => `tokens ${d.first_token}–${d.first_token + d.tokens - 1} of document ${d.document}`;
  const share = isNumber(s.repeated_ngrams) ? `${(100 * s.repeated_ngrams).toFixed(1)}%` : "—";
  const entropy = isNumber(s.byte_entropy) ? s.byte_entropy.toFixed(2) : "—";
  const rankOf = (r) => (isNumber(r) ? ` #${r}` : "");
  return el("tr", {},
    el("td", { className: "n" }, num(s.loss), el("span", { className: "why-rank", textContent: rankOf(s.loss_rank) })),
    el("td", { className: "n" }, num(s.grad_norm), el("span", { className: "why-rank", textContent: rankOf(s.grad_rank) })),
    el("td", { className: "n", textContent: `${s.rank} · ${s.micro} · ${s.row}` }),
    el("td", { className: "why-doc" }, ...byDoc((d) => el("div", { textContent: d.id, title: tokens(d) }))),
    el("td", { className: "why-source" }, ...byDoc((d) => el("div", { textContent: `${d.source}:${d.offset}` }))),
    el("td", { className: "n", textContent: share }),
    el("td", { className: "n", textContent: entropy }),
    el("td", { className: "why-dup", textContent: s.duplicate_of ?? "—" }),
    el("td", {}, el("pre", { className: "why-text", textContent: s.preview ?? "" })));
}

function batchTable(b) {
  const about = el("p", { className: "why-batch",
    textContent: `batch of step ${b.step}: ${b.sequences} sequences, mean loss ${num(b.mean_loss)}, ` +
                 `mean grad norm ${num(b.mean_grad_norm)}; those with the highest loss or gradient:` });
  const head = el("tr", {}, ...COLUMNS.map(([name, help]) => el("th", { textContent: name, title: help })));
  const table = el("table", { className: "why-sequences" }, el("thead", {}, head),
                   el("tbody", {}, ...(b.top ?? []).map(sequenceRow)));
  return [about, table];
}

// A collapsed <details> for an alert whose data carries an attribution, or
// null. `open` and `onToggle` keep it open across the list's redraws;
// `titleOf(key)` names a statistic (the catalogue's title).
export function whySection(alert, { open = false, onToggle = () => {}, titleOf = (k) => k } = {}) {
  const why = alert.data?.attribution;
  if (!why || (!why.moved_first && !why.batch)) return null;
  const details = el("details", { className: "why" }, el("summary", {}, el("b", { textContent: "Why: " }), summary(why)));
  const fill = () => {
    if (details.dataset.filled) return;
    details.dataset.filled = "1";
    const body = el("div", { className: "why-body" });
    if (why.moved_first) body.append(movedFirst(why.moved_first, alert.step, titleOf));
    if (why.batch) body.append(...batchTable(why.batch));
    details.append(body);
  };
  details.addEventListener("toggle", () => {
    if (details.open) fill();
    onToggle(details.open);
  });
  if (open) {
    fill();
    details.open = true;
  }
  return details;
}

// The run's rewinds from its events: each "rewind" event's plan with the
// step the next restart resumed from (when it did):
//   { step, kind, skipSteps, skipBatches, atMost, restartedAt, time, label }
export function rewindsOf(events) {
  const out = [];
  events.forEach((e, i) => {
    if (e.kind !== "rewind") return;
    let plan = {};
    try { plan = JSON.parse(e.detail) ?? {}; } catch { /* an unreadable plan: said as such below */ }
    const restart = events.slice(i + 1).find((x) => x.kind === "restart" || x.kind === "rewind");
    const r = {
      step: plan.alert_step ?? e.step,
      kind: plan.kind ?? "an alert",
      skipSteps: Array.isArray(plan.skip_steps) && plan.skip_steps.length ? plan.skip_steps : [plan.alert_step ?? e.step],
      skipBatches: Array.isArray(plan.skip_batches) ? plan.skip_batches : [],
      atMost: plan.restart_at_or_before,
      restartedAt: restart?.kind === "restart" ? restart.step : null,
      time: e.time,
    };
    const batches = r.skipBatches.length ? ` (batch${r.skipBatches.length > 1 ? "es" : ""} ${r.skipBatches.join(", ")})` : "";
    const restarted = r.restartedAt !== null ? `restarted from step ${r.restartedAt}`
      : r.atMost !== undefined ? `restarts from a checkpoint at or before step ${r.atMost}` : "restart unknown";
    r.label = `rewind: skipped the batches of ${steps(r.skipSteps)}${batches}, ${restarted}`;
    out.push(r);
  });
  return out;
}
