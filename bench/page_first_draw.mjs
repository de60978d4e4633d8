// The run page's first draw in Debian's chromium: milliseconds from
// navigation start until every chart is drawn, median of LOADS fresh loads
// (default 5; the benches' --small modes load once). Prints one JSON object.
// usage: node page_first_draw.mjs URL [LOADS]
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../web/package.json"));
const { chromium } = require("playwright-core");

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium",
                                        args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
const loads = Number(process.argv[3] ?? 5);
if (!Number.isInteger(loads) || loads < 1) throw new Error(`LOADS must be a count, not ${process.argv[3]}`);
const times = [];
for (let i = 0; i < loads; i++) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await page.goto(process.argv[2]);
  await page.waitForFunction(() => window.hlatDashboard?.drawn > 0, null, { timeout: 30000 });
  times.push(await page.evaluate(() => window.hlatDashboard.firstDrawMs));
  await page.close();
}
await browser.close();
times.sort((a, b) => a - b);
console.log(JSON.stringify({ first_draw_ms: Math.round(times[Math.floor(loads / 2)]),
                              first_draw_max_ms: Math.round(times[loads - 1]) }));
