// The metric picker: every key of the run under its catalogue group, in the
// catalogue's order, the drawn ones ticked; hovering a key shows its title.
// A search box keeps only the keys whose name or title holds every word
// typed (a run with 300 tensor norms is searched, not scrolled).

// Fills `groupsBox` with the keys of `ordered` (in order), grouped by
// groupOf(key); entryOf(key): { title, unit } or undefined; shown: a Set;
// onToggle(key, on). Then applies the search box's words.
export function showPicker(groupsBox, filterBox, { ordered, groupOf, entryOf, shown, onToggle }) {
  const groups = new Map();
  for (const k of ordered) {
    const group = groupOf(k);
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(k);
  }
  groupsBox.replaceChildren(...[...groups].map(([group, keys]) => {
    const fieldset = document.createElement("fieldset");
    fieldset.append(Object.assign(document.createElement("legend"), { textContent: group }));
    for (const k of keys) {
      const { title, unit } = entryOf(k) ?? {};
      const label = Object.assign(document.createElement("label"), { title: `${title ?? k}${unit ? ` (${unit})` : ""}` });
      label.dataset.search = `${k} ${title ?? ""} ${group}`.toLowerCase();
      const box = Object.assign(document.createElement("input"), { type: "checkbox", value: k, checked: shown.has(k) });
      box.addEventListener("change", () => onToggle(k, box.checked));
      label.append(box, k);
      fieldset.append(label);
    }
    return fieldset;
  }));
  applyFilter(groupsBox, filterBox.value);
  if (!filterBox.dataset.wired) {
    filterBox.dataset.wired = "1";
    filterBox.addEventListener("input", () => applyFilter(groupsBox, filterBox.value));
  }
}

function applyFilter(groupsBox, text) {
  const words = text.toLowerCase().split(/\s+/).filter(Boolean);
  for (const fieldset of groupsBox.children) {
    let any = false;
    for (const label of fieldset.querySelectorAll("label")) {
      const hit = words.every((w) => label.dataset.search.includes(w));
      label.hidden = !hit;
      any ||= hit;
    }
    fieldset.hidden = !any;
  }
}
