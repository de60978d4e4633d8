// The runs list's editor of a run's tags and note: a row under the run's
// row, kept by the list across its refreshes (the same elements go back in,
// so what was typed, where the caret was and a refusal's message survive),
// closed only by a save that went through, Cancel, or ✎ again.

const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};

// The token of the last save that went through, so a second edit does not
// ask again; a refused one is never kept.
const TOKEN_KEY = "hlat-token";

// An open editor of run `r` as a <tr> spanning `columns`; onDone() after a
// save went through or Cancel.
export function runEditor(r, columns, onDone) {
  const tags = el("input", { type: "text", size: 24, value: (r.tags || []).join(", "), placeholder: "tag, tag" });
  const note = el("input", { type: "text", size: 40, value: r.note || "" });
  const token = el("input", { type: "password", size: 20, value: sessionStorage.getItem(TOKEN_KEY) || "",
                              placeholder: "printed by hlat serve", autocomplete: "off" });
  const save = el("button", { type: "submit", textContent: "Save" });
  const cancel = el("button", { type: "button", textContent: "Cancel" });
  const message = el("span", { className: "edit-message", role: "alert" });
  const dismiss = el("button", { type: "button", className: "dismiss", textContent: "×", title: "dismiss", hidden: true });
  const form = el("form", { className: "run-editor" },
                  el("label", {}, "tags ", tags), " ", el("label", {}, "note ", note), " ",
                  el("label", {}, "token ", token), " ", save, " ", cancel, " ", message, dismiss);
  const tr = el("tr", { className: "editor" }, el("td", { colSpan: columns }, form));
  tr.dataset.run = r.name;
  const say = (text) => {
    message.textContent = text;
    dismiss.hidden = !text;
  };
  dismiss.addEventListener("click", () => say(""));
  cancel.addEventListener("click", onDone);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    save.disabled = true;
    say("saving…");
    try {
      const response = await fetch(`/api/v1/runs/${encodeURIComponent(r.name)}/annotate`, {
        method: "POST", headers: { "X-HLAT-Token": token.value },
        body: JSON.stringify({ tags: tags.value.split(",").map((t) => t.trim()).filter(Boolean), note: note.value }),
      });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        say(`Not saved (HTTP ${response.status}): ${body.error || response.statusText}`);
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, token.value);
      onDone();
    } catch (err) {
      say(`Not saved: ${err.message}`);
    } finally {
      save.disabled = false;
    }
  });
  return tr;
}
