// Drives the TypeScript client against a real fleet
// (TestClientsAgainstAFleet): the same workload as drive.py.
// Usage: node drive.mjs CLIENT_MODULE BASE_URL TOKEN PREFIX TYPE OPERATOR_TOKEN
const [modPath, base, token, p, typ, opToken] = process.argv.slice(2);
const { LeasecronClient, ConflictError, UniqueKeyHeldError } = await import(modPath);
const lc = new LeasecronClient({ baseUrl: base, token, timeoutMs: 60000 });
const out = { ran: [], cancelled: [], pairs: [], batch: p + "batch", series: p + "r", checks: 0 };
const check = (cond, what) => {
  if (!cond) {
    console.error("check failed: " + what);
    process.exit(1);
  }
  out.checks++;
};
const pad = (n, w) => String(n).padStart(w, "0");

for (let half = 0; half < 2; half++) {
  const tasks = [];
  for (let i = 0; i < 400; i++) tasks.push({ id: `${p}m-${pad(half * 400 + i, 3)}`, type: typ, in: `${(i % 20) / 2}s`, payload: { n: i } });
  const res = await lc.scheduleMany({ tasks });
  check(res.scheduled === 400, `scheduleMany scheduled ${res.scheduled} of 400`);
  out.ran.push(...tasks.map((t) => t.id));
}
{
  const tasks = [];
  for (let i = 0; i < 100; i++) tasks.push({ id: `${p}b-${pad(i, 3)}`, type: typ, in: "1s" });
  const res = await lc.scheduleMany({ tasks, batch: out.batch, on_complete: { type: typ, payload: "batch done" } });
  check(res.scheduled === 100 && res.batch === out.batch, `batch: ${JSON.stringify(res)}`);
  out.ran.push(...tasks.map((t) => t.id));
}
for (let i = 0; i < 40; i++) {
  const task = await lc.schedule({ id: `${p}s-${pad(i, 2)}`, type: typ, in: "2s", payload: { single: i } });
  check(task.id === `${p}s-${pad(i, 2)}`, `schedule answered ${JSON.stringify(task)}`);
  out.ran.push(task.id);
}
{
  const again = await lc.schedule({ id: `${p}s-00`, type: typ, in: "2s", payload: { single: 0 } });
  check(again.id === `${p}s-00`, "an identical retry answers the task");
  try {
    await lc.schedule({ id: `${p}s-01`, type: typ, in: "2s", payload: { single: "other" } });
    check(false, "the same id with another body was accepted");
  } catch (e) {
    check(e instanceof ConflictError && !(e instanceof UniqueKeyHeldError), `a plain conflict: ${e}`);
  }
}
for (let i = 0; i < 20; i++) {
  await lc.schedule({ id: `${p}u-${pad(i, 2)}`, type: typ, in: "3s", unique_key: `${p}key-${pad(i, 2)}` });
  out.ran.push(`${p}u-${pad(i, 2)}`);
  try {
    await lc.schedule({ id: `${p}u2-${pad(i, 2)}`, type: typ, unique_key: `${p}key-${pad(i, 2)}` });
    check(false, "a held unique key was taken");
  } catch (e) {
    check(e instanceof UniqueKeyHeldError && e.holder === `${p}u-${pad(i, 2)}`, `holder: ${e}`);
  }
}
for (let i = 0; i < 20; i++) {
  const parent = `${p}p-${pad(i, 2)}`, child = `${p}c-${pad(i, 2)}`;
  await lc.schedule({ id: parent, type: typ, in: "1s" });
  await lc.schedule({ id: child, type: typ, after: [parent] });
  out.ran.push(parent, child);
  out.pairs.push([parent, child]);
}
for (let i = 0; i < 10; i++) {
  const id = `${p}x-${pad(i, 2)}`;
  await lc.schedule({ id, type: typ, in: "1h" });
  const st = await lc.status(id);
  check(st.state === "scheduled", `status before cancel: ${JSON.stringify(st)}`);
  const res = await lc.cancel(id);
  check(res.removed, `cancel: ${JSON.stringify(res)}`);
  out.cancelled.push(id);
}
// 5 cancelled by one bulk operation, its start sent twice with its id: the
// second finds the first's operation and starts nothing.
const ops = new LeasecronClient({ baseUrl: base, token: opToken, timeoutMs: 60000 });
const kids = [0, 1, 2, 3, 4].map((i) => `${p}k-${i}`);
for (const id of kids) await lc.schedule({ id, type: typ, in: "1h" });
const bid = `bulk-${p}cancel`;
for (let send = 1; send <= 2; send++) {
  const b = await ops.startBulk({ id: bid, kind: "cancel-pending", type: typ, id_prefix: `${p}k-`, expect: 5 });
  check(b.id === bid, `bulk send ${send}: ${JSON.stringify(b)}`);
}
let bulk = await ops.bulk(bid);
for (const deadline = Date.now() + 120000; bulk.state === "running" && Date.now() < deadline; bulk = await ops.bulk(bid)) {
  await new Promise((r) => setTimeout(r, 500));
}
check(bulk.state === "succeeded" && bulk.done === 5, `bulk: ${JSON.stringify(bulk)}`);
check((await ops.bulks()).operations.filter((o) => o.id === bid).length === 1, "one operation of the id");
out.cancelled.push(...kids);
await lc.schedule({ id: out.series, type: typ, every: "1s" });
const st = await lc.wait(`${p}s-39`, { timeoutMs: 120000 });
check(st.run?.state === "succeeded", `wait: ${JSON.stringify(st)}`);
console.log(JSON.stringify(out));
