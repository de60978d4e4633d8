// End-to-end, in Debian's chromium: while another process holds the store
// locked past the server's busy timeout, the runs list and the run page show
// a banner naming the cause (from /api/v1/health), and the runs list drops it
// at its next refresh once the lock is gone and the kept rows are written.
// usage: node store_health.mjs HLAT_BINARY WORK_DIR
import { spawn } from "node:child_process";
import path from "node:path";
import { check, finish, freshDir, launchChromium } from "./harness.mjs";

const [hlat, work] = process.argv.slice(2);
freshDir(work);
const store = path.join(work, "hlat.db");
const token = "e2e-token-0123456789";

const server = spawn(hlat, ["serve", "--store", store, "--create", "--port", "0", "--token", token, "--stale-after", "0"],
                     { stdio: ["ignore", "pipe", "inherit"] });
// Another process's lock (as `sqlite3 hlat.db` with BEGIN EXCLUSIVE), held until its stdin closes.
let locker = null;
process.on("exit", () => { server.kill(); locker?.kill(); });
const url = await new Promise((resolve, reject) => {
  server.stdout.on("data", (d) => { const m = /open (http:\/\/127\.0\.0\.1:\d+\/)/.exec(String(d)); if (m) resolve(m[1]); });
  server.on("exit", () => reject(new Error("hlat serve exited")));
});
const ingest = (step) => fetch(`${url}api/v1/runs/r/ingest`, {
  method: "POST", headers: { "X-HLAT-Token": token }, body: JSON.stringify({ step, loss: 2 - step / 100 }) + "\n",
}).then((r) => r.status);

const browser = await launchChromium();
try {
  check(await ingest(0) === 200, "a run is fed");
  locker = spawn("python3", ["-c", "import sqlite3, sys\n" +
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\n" +
    "print('locked', flush=True)\nsys.stdin.read()\nc.execute('ROLLBACK')", store], { stdio: ["pipe", "pipe", "inherit"] });
  await new Promise((resolve) => locker.stdout.once("data", resolve));
  const during = ingest(1);  // waits on the lock, then the store is failing

  const runs = await browser.newPage();
  await runs.goto(url);
  await runs.waitForSelector("#store-health:not([hidden])", { timeout: 30000 });
  const text = await runs.locator("#store-health").innerText();
  check(/cannot be written/.test(text) && /locked by another connection/.test(text),
        `the runs list shows the failing store and why (${text.slice(0, 100)}...)`);
  const run = await browser.newPage();
  await run.goto(`${url}static/run.html?run=r`);
  await run.waitForSelector("#store-health:not([hidden])", { timeout: 15000 });
  check(true, "and so does the run page");

  locker.stdin.end();  // the lock is released
  check([200, 503].includes(await during), "the ingest under way is answered (200, or 503: retrying)");
  await runs.waitForSelector("#store-health", { state: "hidden", timeout: 30000 });
  check(true, "the banner goes once the store is written again");
  check(await ingest(2) === 200, "and ingest works again");
} catch (e) {
  check(false, `browser checks: ${e.message}`);
} finally {
  await browser.close();
}
finish();
