// Messages that stay until dismissed, next to the control they answer (a
// halt refused shows beside the Halt button, not at the bottom of a long
// page), and that no refresh of the page's data erases. A slot holds one
// message: a newer one from the same control replaces it.

// Shows `text` in `slot` (an element beside the control); kind: "error",
// "ok" or "info". Returns the message element.
export function say(slot, text, kind = "info") {
  const box = Object.assign(document.createElement("span"), { className: `message ${kind}` });
  box.setAttribute("role", kind === "error" ? "alert" : "status");
  const close = Object.assign(document.createElement("button"), { type: "button", className: "dismiss", textContent: "×",
                                                                   title: "dismiss" });
  close.setAttribute("aria-label", "dismiss");
  close.addEventListener("click", () => box.remove());
  box.append(Object.assign(document.createElement("span"), { className: "text", textContent: text }), close);
  slot.replaceChildren(box);
  return box;
}

// Takes back the slot's message, if it is of `kind` (any kind when not given).
export function unsay(slot, kind) {
  const box = slot.querySelector(".message");
  if (box && (!kind || box.classList.contains(kind))) box.remove();
}
