// Drives Debian's Chromium with playwright-core through a plan of steps read as JSON on stdin,
// and writes what each step saw as JSON on stdout. One browser launch per run; each
// "context" step opens a fresh browser context (no cookies), like a new person.
//
// Environment: PLAYWRIGHT_CORE (the playwright-core package folder), CHROMIUM_BIN.
"use strict";

const fs = require("fs");

const { chromium } = require(process.env.PLAYWRIGHT_CORE);

async function main() {
  const plan = JSON.parse(fs.readFileSync(0, "utf8"));
  // launch() always starts Chromium on a fresh, empty temporary profile of its own (it
  // refuses --user-data-dir), removed when the browser closes.
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const results = [];
  let context = null;
  let page = null;
  const external = [];
  let failed = null;
  try {
    for (const step of plan.steps) {
      if (failed) break;
      const out = { step: step.name || step.op };
      try {
      if (step.op === "context") {
        if (context) await context.close();
        context = await browser.newContext({ viewport: { width: 1366, height: 800 } });
        page = await context.newPage();
        page.on("request", (request) => {
          const url = request.url();
          if (!url.startsWith(plan.origin)) external.push(url);
        });
        page.on("console", (message) => {
          if (message.type() === "error") external.push("console error: " + message.text());
        });
      } else if (step.op === "goto") {
        const response = await page.goto(plan.origin + step.path);
        out.status = response.status();
        out.headers = response.headers();
      } else if (step.op === "fill") {
        await page.fill(step.selector, step.value);
      } else if (step.op === "click") {
        await Promise.all([page.waitForLoadState("load"), page.click(step.selector)]);
      } else if (step.op === "press") {
        await page.keyboard.press(step.key);
        out.focused = await page.evaluate(() => {
          const e = document.activeElement;
          return e ? (e.id || e.getAttribute("name") || e.textContent || e.tagName).trim() : "";
        });
      } else if (step.op === "count") {
        out.count = await page.locator(step.selector).count();
      } else if (step.op === "post") {
        // A forged POST from this context (its cookies), as a script on another page would try.
        const html = await page.content();
        const match = /name="csrf" value="([^"]+)"/.exec(html);
        const form = Object.assign({}, step.form);
        if (step.withToken && match) form.csrf = match[1];
        const headers = step.headers || {};
        const response = await context.request.post(plan.origin + step.path, {
          form,
          headers,
          maxRedirects: 0,
        });
        out.status = response.status();
      } else if (step.op === "screenshot") {
        await page.screenshot({ path: step.file, fullPage: true });
      } else {
        throw new Error("unknown step " + step.op);
      }
      } catch (error) {
        failed = `step ${results.length} (${out.step}): ${error.message}`;
        out.error = failed;
      }
      if (page && step.op !== "post") {
        out.url = page.url();
        out.html = await page.content();
        out.title = await page.title();
      }
      results.push(out);
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify({ results, external, failed }));
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error) + "\n");
  process.exit(1);
});
