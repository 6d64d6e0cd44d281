// Drives the leasecron dashboard in Debian's headless Chromium through
// playwright-core (pinned in package.json; no browser download).
//
// Usage: node dashboard.cjs PLAN.json
// PLAN: {"base": "http://127.0.0.1:PORT", "pages": [{"path": "/", "ids": [...]}],
//        "actions": true|false, "screenshots": "DIR" (optional), "refreshWait": ms}
// Prints one JSON line: {"ok": bool, "failures": [...], "steps": [...]}.
// The Go test (internal/e2e/dashboard_test.go) prepares the fleet, runs
// this, then checks through the CLI that every click took effect.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const base = plan.base;
const origin = new URL(base).origin;
const failures = [];
const steps = [];
const fail = (msg) => failures.push(msg);
const step = (msg) => steps.push(msg);

// browse runs f in a fresh Chromium signed in with credentials (basic
// auth; none when undefined).
async function browse(credentials, f) {
  const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "leasecron-chromium-"));
  const ctx = await chromium.launchPersistentContext(userDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1280, height: 860 },
    colorScheme: plan.colorScheme || "light",
    httpCredentials: credentials,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    await f(ctx);
  } finally {
    await ctx.close();
    fs.rmSync(userDir, { recursive: true, force: true });
  }
}

async function main() {
  if (plan.bulk) {
    await browse(plan.operator, bulk);
    return;
  }
  await browse(plan.operator, run);
  if (plan.viewer) await browse(plan.viewer, viewer);
}

// viewer checks what a viewer gets: every page, no action, every POST
// refused.
async function viewer(ctx) {
  const page = await ctx.newPage();
  page.setDefaultTimeout(20000);
  for (const p of ["/", "/tasks", "/tasks/" + encodeURIComponent(plan.series), "/recurring", "/deadletters", "/blackboard", "/audit"]) {
    const resp = await page.goto(base + p);
    if (!resp || resp.status() !== 200) { fail(`viewer GET ${p}: status ${resp && resp.status()}`); continue; }
    const forms = await page.locator('main form[method="post"]').count();
    if (forms !== 0) fail(`viewer GET ${p}: ${forms} action form(s) shown`);
    if ((await page.locator("#user").textContent()) !== plan.viewer.username) fail(`viewer GET ${p}: the footer does not name the viewer`);
  }
  step("viewer: every page without an action");
  const resp = await page.request.post(base + "/tasks/" + encodeURIComponent(plan.series) + "/disable", { form: { back: "/" }, maxRedirects: 0 });
  const body = await resp.text();
  if (resp.status() !== 403 || !body.includes("viewers cannot act")) fail(`viewer POST answered ${resp.status()}: ${body}`);
  step("viewer POST refused: " + resp.status());
}

// bulk requeues every dead letter through the dead letters page's
// "Requeue matching…" form: the confirmation names the count, and the
// operation's page, followed until it finishes, gives the final counts.
async function bulk(ctx) {
  const page = await ctx.newPage();
  page.on("pageerror", (e) => fail("page error on " + page.url() + ": " + e.message));
  let confirmed = "";
  page.on("dialog", (d) => { confirmed = d.message(); step("confirm: " + confirmed); d.accept(); });
  page.setDefaultTimeout(20000);
  await page.goto(base + "/deadletters");
  await page.locator("#bulk-dead").getByRole("button", { name: "Requeue matching…" }).click();
  await page.waitForURL(/\/bulk\/new/);
  const matches = (await page.locator("#bulk-matches").textContent()).trim();
  if (matches !== String(plan.bulk.count)) fail(`the bulk page counts ${matches} matching, want ${plan.bulk.count}`);
  if (plan.screenshots) {
    await page.screenshot({ path: path.join(plan.screenshots, "bulk-new.png") });
    step("screenshot bulk-new.png");
  }
  await page.locator("#bulk-start button").click();
  await page.waitForURL(/\/bulk\/bulk-/);
  if (!confirmed.includes(`Requeue ${plan.bulk.count} dead letters (requeue-dead (all))`)) fail(`the confirmation ${JSON.stringify(confirmed)} does not name the count`);
  step("started: " + page.url());
  if (await page.locator("main tr").count() > 20) fail("the operation's page loads rows");
  const deadline = Date.now() + plan.bulk.waitMs;
  for (;;) {
    const state = (await page.locator("#bulk-state").textContent()).trim();
    if (state !== "running") break;
    if (Date.now() > deadline) { fail("the bulk operation is still running: " + (await page.locator("#bulk-summary").textContent())); return; }
    await page.waitForTimeout(1000);
    await page.reload();
  }
  const state = (await page.locator("#bulk-state").textContent()).trim();
  const done = (await page.locator("#bulk-done").textContent()).trim();
  const failed = (await page.locator("#bulk-failed").textContent()).trim();
  if (state !== "succeeded" || done !== String(plan.bulk.count) || failed !== "0") fail(`the operation ended ${state} with ${done} done and ${failed} failed, want succeeded with ${plan.bulk.count} and 0`);
  step(`bulk: ${state}, ${done} done, ${failed} failed: ` + (await page.locator("#bulk-summary").textContent()));
  if (plan.screenshots) {
    await page.screenshot({ path: path.join(plan.screenshots, "bulk.png") });
    step("screenshot bulk.png");
  }
  await page.goto(base + "/bulk");
  if (await page.locator("#bulk-table tbody tr").count() < 1) fail("the bulk list shows no operation");
  await page.goto(base + "/audit");
  const rows = page.locator("#audit-table tbody tr").filter({ has: page.locator("td.action", { hasText: /^bulk$/ }) });
  if (await rows.count() < 1) fail("the audit page lists no bulk action");
}

async function run(ctx) {
  // No request may leave the dashboard's origin.
  ctx.on("request", (req) => {
    const u = req.url();
    if (!u.startsWith(origin + "/") && u !== origin && !u.startsWith("data:")) fail("request left the origin: " + u);
  });
  const page = await ctx.newPage();
  page.on("console", (m) => { if (m.type() === "error") fail("console error on " + page.url() + ": " + m.text()); });
  page.on("pageerror", (e) => fail("page error on " + page.url() + ": " + e.message));
  page.on("dialog", (d) => { step("confirm: " + d.message()); d.accept(); });
  page.setDefaultTimeout(20000);

  for (const p of plan.pages) {
    const resp = await page.goto(base + p.path);
    if (!resp || resp.status() !== 200) { fail(`GET ${p.path}: status ${resp && resp.status()}`); continue; }
    for (const id of p.ids) {
      if (await page.locator("#" + id).count() !== 1) fail(`GET ${p.path}: no element #${id}`);
    }
    for (const sel of p.selectors || []) {
      if (await page.locator(sel).count() < 1) fail(`GET ${p.path}: nothing matches ${sel}`);
    }
    if (await page.locator("main img").count() !== 0) fail(`GET ${p.path}: an <img> element was rendered from data`);
    if (await page.evaluate(() => window.__xss === 1)) fail(`GET ${p.path}: the XSS payload ran`);
    if (plan.screenshots && p.shot) {
      await page.screenshot({ path: path.join(plan.screenshots, p.shot), fullPage: !!p.fullPage });
      step("screenshot " + p.shot);
    }
    step("rendered " + p.path);
  }
  if (plan.screenshots) {
    // Dark mode follows the system's setting.
    await page.emulateMedia({ colorScheme: "dark" });
    await page.goto(base + "/");
    await page.screenshot({ path: path.join(plan.screenshots, "overview-dark.png") });
    await page.emulateMedia({ colorScheme: "light" });
    step("screenshot overview-dark.png");
  }
  if (!plan.actions) return;

  // The payload shows as text, exactly.
  await page.goto(base + "/tasks/" + encodeURIComponent(plan.xssTask));
  const shown = await page.locator("#payload").textContent();
  if (shown !== plan.xssPayload) fail(`XSS payload shown as ${JSON.stringify(shown)}`);
  if (await page.evaluate(() => window.__xss === 1)) fail("the XSS payload ran");

  // A POST without the CSRF token is refused: sent with the browser's
  // cookies (the CSRF cookie included) but no token.
  const resp = await page.request.post(base + "/tasks/" + encodeURIComponent(plan.csrfTask) + "/cancel", { form: { back: "/" }, maxRedirects: 0 });
  const status = resp.status();
  if (status !== 403) fail(`POST without a CSRF token answered ${status}, want 403`);
  step("csrf-less POST refused: " + status);

  const flash = async (want) => {
    const f = page.locator("#flash");
    await f.waitFor();
    const t = (await f.textContent()).trim();
    if (!t.includes(want)) fail(`flash ${JSON.stringify(t)} lacks ${JSON.stringify(want)}`);
    step("flash: " + t);
  };

  // Schedule through the form.
  await page.goto(base + "/tasks");
  const form = page.locator("#schedule-form");
  await form.locator('input[name="id"]').fill(plan.schedule.id);
  await form.locator('input[name="type"]').fill(plan.schedule.type);
  await form.locator('input[name="in"]').fill(plan.schedule.in);
  await form.locator('textarea[name="payload"]').fill(plan.schedule.payload);
  await page.click("#schedule-submit");
  await flash("scheduled " + plan.schedule.id);

  // Reschedule, run now, cancel: buttons on the tasks page's rows.
  const row = (id) => page.locator(`#tasks-table tr[data-id="${id}"]`);
  await page.goto(base + "/tasks");
  await row(plan.reschedule.id).locator('input[name="in"]').fill(plan.reschedule.in);
  await row(plan.reschedule.id).getByRole("button", { name: "Reschedule" }).click();
  await flash(plan.reschedule.id + " now due");
  await row(plan.runNow).getByRole("button", { name: "Run now" }).click();
  await flash(plan.runNow + " is due now");
  await row(plan.cancel).getByRole("button", { name: "Cancel" }).click();
  await flash("cancelled " + plan.cancel);

  // Runs: the state filter is a link.
  await page.goto(base + "/runs");
  await page.locator('#state-tabs a', { hasText: "succeeded" }).click();
  await page.waitForURL(/state=succeeded/);
  step("runs filtered: " + page.url());

  // Dead letters: requeue one, then all; wait for the one that dies again,
  // then purge.
  await page.goto(base + "/deadletters");
  await page.locator(`#deadletters-table tr[data-id="${plan.requeue}"]`).getByRole("button", { name: "Requeue" }).click();
  await flash("requeued " + plan.requeue);
  await page.getByRole("button", { name: "Requeue all" }).click();
  await flash("requeued");
  const deadline = Date.now() + 60000;
  for (;;) {
    await page.goto(base + "/deadletters");
    if (await page.locator(`#deadletters-table tr[data-id="${plan.diesAgain}"]`).count() === 1) break;
    if (Date.now() > deadline) { fail(plan.diesAgain + " never came back to the dead letters"); break; }
    await page.waitForTimeout(1000);
  }
  await page.getByRole("button", { name: "Purge" }).click();
  await flash("purged");

  // Blackboard: run a key now, remove another.
  await page.goto(base + "/blackboard");
  await page.locator(`#keys-table tr[data-key="${plan.keyRunNow}"]`).getByRole("button", { name: "Run now" }).click();
  await flash(plan.keyRunNow + " will run");
  await page.locator(`#keys-table tr[data-key="${plan.keyRemove}"]`).getByRole("button", { name: "Remove" }).click();
  await flash("removed " + plan.keyRemove);

  // Recurring: disable a series, then enable it again.
  const series = () => page.locator(`#series-table tr[data-id="${plan.series}"]`);
  await page.goto(base + "/recurring");
  await series().getByRole("button", { name: "Disable" }).click();
  await flash(plan.series + " disabled");
  if (await series().locator(".disabled").count() !== 1) fail("the disabled series does not show as disabled");
  if (plan.screenshots) {
    await page.screenshot({ path: path.join(plan.screenshots, "recurring-disabled.png") });
    step("screenshot recurring-disabled.png");
  }
  await series().getByRole("button", { name: "Enable" }).click();
  await flash(plan.series + " enabled");

  // Fleet: drain one worker; it shows as draining until it is gone. An
  // idle worker is gone within about a second of seeing the request,
  // which can be before the page after the click is read; so the worker
  // is held stopped (SIGSTOP) from before the click until the page has
  // been looked at, as a busy worker would stay, and let go after.
  if (plan.drain) {
    const inst = () => page.locator(`#instances-table tr[data-id="${plan.drain}"]`);
    await page.goto(base + "/fleet");
    if (plan.drainPid) process.kill(plan.drainPid, "SIGSTOP");
    try {
      await inst().getByRole("button", { name: "Drain" }).click();
      await flash(plan.drain + " asked to drain");
      if (await inst().locator("td", { hasText: /^draining$/ }).count() !== 1 || await inst().getByRole("button", { name: "Drain" }).count() !== 0) {
        fail("the drained instance does not show as draining, or still offers Drain");
      }
      if (plan.screenshots) {
        await page.screenshot({ path: path.join(plan.screenshots, "fleet-draining.png") });
        step("screenshot fleet-draining.png");
      }
    } finally {
      if (plan.drainPid) process.kill(plan.drainPid, "SIGCONT");
    }
  }

  // Audit: every action above, by the signed-in operator.
  await page.goto(base + "/audit");
  for (const action of ["schedule", "reschedule", "run-now", "cancel", "requeue", "purge", "disable", "enable"].concat(plan.drain ? ["drain"] : [])) {
    const rows = page.locator("#audit-table tbody tr").filter({ has: page.locator("td.action", { hasText: new RegExp("^" + action + "$") }) });
    if (await rows.count() < 1) { fail(`the audit page lists no ${action}`); continue; }
    const who = (await rows.first().locator("td.who").textContent()).trim();
    if (plan.operator && who !== plan.operator.username) fail(`the audit page names ${who} for ${action}, want ${plan.operator.username}`);
  }
  if (plan.screenshots) {
    await page.screenshot({ path: path.join(plan.screenshots, "audit.png") });
    step("screenshot audit.png");
  }
  step("audit lists the actions");

  // Search from the header's box: an id alone opens its task; each token
  // lists what it should.
  const search = async (q) => {
    const box = page.locator('#search-box input[name="q"]');
    await box.fill(q);
    await Promise.all([page.waitForNavigation(), box.press("Enter")]);
  };
  await page.goto(base + "/");
  await search(plan.xssTask);
  if (!page.url().endsWith("/tasks/" + plan.xssTask)) fail(`searching ${plan.xssTask} landed on ${page.url()}`);
  for (const [q, id] of plan.searches || []) {
    await search(q);
    if (await page.locator(`#search-table tr[data-id="${id}"]`).count() < 1) fail(`search ${JSON.stringify(q)} does not list ${id}`);
    else step(`search ${q}: ${id} listed`);
  }

  // Live refresh: the overview's figures update without a reload.
  await page.goto(base + "/");
  const before = await page.locator("#updated").textContent();
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.waitForFunction((b) => document.getElementById("updated").textContent !== b, before, { timeout: plan.refreshWait || 30000 });
  if (!(await page.evaluate(() => window.__sameDocument === true))) fail("the page reloaded instead of refreshing in place");
  step("refreshed in place");
}

main()
  .catch((e) => fail("script: " + (e && e.stack || e)))
  .finally(() => {
    process.stdout.write(JSON.stringify({ ok: failures.length === 0, failures, steps }) + "\n");
    process.exit(0);
  });
