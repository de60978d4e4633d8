// The store's health (GET /api/v1/health) as a banner at the top of a page:
// shown while the store cannot be written (locked by another process, disk
// full), with the reason and the rows that wait; hidden once it recovers.
export async function showStoreHealth(banner) {
  let body;
  try {
    body = await (await fetch("/api/v1/health")).json();
  } catch (e) {
    return;  // the server is gone: the page's own requests say so
  }
  if (body.store !== "failing") {
    banner.hidden = true;
    return;
  }
  const since = new Date(body.since * 1000).toLocaleTimeString();
  banner.textContent = body.retrying
    ? `The store cannot be written since ${since}: ${body.error}. ${body.queued_rows} rows are kept and ` +
      "retried; new records are refused until it recovers."
    : `The store failed at ${since} and takes no more writes: ${body.error}. Restart hlat serve once it is fixed.`;
  banner.hidden = false;
}
