// Whether the page still hears from the server. The event stream's errors
// and failed requests are checked against GET /api/v1/health (any answer,
// 503 included, means the server is there); while it does not answer, it is
// asked again every few seconds, and `onChange` is told both ways, so the
// header says "disconnected — last heard 09:41:15" instead of a green
// "running", and says so no longer once the server is back.
const PROBE_MS = 3000, TIMEOUT_MS = 3000;

export function connection(onChange) {
  const c = {
    connected: true,
    lastHeard: new Date(),
    // Something came from the server (a stream event, an answered request).
    heard() {
      c.lastHeard = new Date();
      if (c.connected) return;
      c.connected = true;
      clearTimeout(retry);
      onChange(true);
    },
    // Something failed: ask the server whether it is there.
    doubt() { if (!probing) probe(); },
    lastHeardText: () => c.lastHeard.toLocaleTimeString("en-GB", { hour12: false }),
  };
  let probing = false, retry = null;
  async function probe() {
    probing = true;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), TIMEOUT_MS);
    let answered = false;
    try {
      await fetch("/api/v1/health", { cache: "no-store", signal: abort.signal });
      answered = true;
    } catch {
      // no answer: the server is gone or unreachable
    }
    clearTimeout(timer);
    probing = false;
    if (answered) return c.heard();
    if (c.connected) {
      c.connected = false;
      onChange(false);
    }
    clearTimeout(retry);
    retry = setTimeout(probe, PROBE_MS);
  }
  return c;
}
