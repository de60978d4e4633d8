// What the browser tests share: Debian's chromium through playwright-core
// (npm, web/package.json), a fresh work folder, and a tally of checks.
import { mkdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../web/package.json"));
const { chromium } = require("playwright-core");

export function freshDir(dir) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
}

export function launchChromium() {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

// check(ok, what) prints one line per check; finish() prints the tally and exits 1 if any failed.
export const tally = { passed: 0, failed: 0 };
export function check(ok, what) {
  if (ok) tally.passed++; else tally.failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
}
export function finish() {
  console.log(`${tally.passed} passed, ${tally.failed} failed`);
  process.exit(tally.failed ? 1 : 0);
}
