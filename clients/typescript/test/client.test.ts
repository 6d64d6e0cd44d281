// Tests of the client against scripted node:http servers on 127.0.0.1: no
// leasecron server is needed.

import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";

import {
  ApiError,
  ConflictError,
  ForbiddenError,
  InvalidError,
  LeasecronClient,
  NetworkError,
  NotFoundError,
  TimeoutError,
  UnauthorizedError,
  UniqueKeyHeldError,
  USER_AGENT,
  parseRetryAfter,
  type ClientOptions,
  type Run,
  type RunState,
  type Task,
  type TaskStatus,
} from "../src/index.js";

const TOKEN = "lct.svc.s3cr3t-value-0123456789";

/** A request the test server received. */
interface Received {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** Milliseconds since the server started. */
  at: number;
}

/** How the test server answers its nth request. */
type Script = (req: Received, res: ServerResponse, n: number) => void | Promise<void>;

/** A running test server. */
interface TestServer {
  url: string;
  requests: Received[];
  client(opts?: Partial<ClientOptions>): LeasecronClient;
}

/**
 * Starts a server answering request n with scripts[n] (the last script for
 * every request past the end), closed when the test ends.
 */
async function serve(t: TestContext, ...scripts: Script[]): Promise<TestServer> {
  const started = Date.now();
  const requests: Received[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const dec = new TextDecoder();
      let body = "";
      for await (const chunk of req) body += dec.decode(chunk, { stream: true });
      body += dec.decode();
      const r: Received = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body, at: Date.now() - started };
      const n = requests.push(r) - 1;
      const script = scripts[Math.min(n, scripts.length - 1)];
      if (script) await script(r, res, n);
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("no address");
  const url = `http://127.0.0.1:${addr.port}`;
  return {
    url,
    requests,
    client: (opts = {}) => new LeasecronClient({ baseUrl: url, token: TOKEN, backoffMs: 10, maxBackoffMs: 50, ...opts }),
  };
}

/** A port on 127.0.0.1 that nothing listens on (any more). */
async function freePort(): Promise<number> {
  const server = createServer(() => {});
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("no address");
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return addr.port;
}

/** Answers with status and a JSON body. */
function json(status: number, body: unknown, headers: Record<string, string> = {}): Script {
  return (_req, res) => {
    res.writeHead(status, { "Content-Type": "application/json", ...headers });
    res.end(JSON.stringify(body));
  };
}

/** Answers with a problem+json body. */
function problem(status: number, kind: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Script {
  return (_req, res) => {
    res.writeHead(status, { "Content-Type": "application/problem+json", ...headers });
    res.end(JSON.stringify({ type: `urn:leasecron:problem:${kind}`, title: kind, status, detail: `${kind} happened`, ...extra }));
  };
}

/** Never answers. */
const hang: Script = () => {};

const task: Task = { id: "t1", type: "email", due: "2030-01-01T00:00:00Z", queue: "default", priority: 3 };

function run(state: RunState): Run {
  return { id: "t1", state, attempts: 1, duplicates: 0 };
}

/** The one value of a header. */
function header(r: Received, name: string): string | undefined {
  const v = r.headers[name];
  return Array.isArray(v) ? v.join(", ") : v;
}

/** Checks the headers every request carries. */
function assertCommonHeaders(r: Received, withBody: boolean): void {
  assert.equal(header(r, "authorization"), `Bearer ${TOKEN}`);
  assert.equal(header(r, "accept"), "application/json");
  assert.equal(header(r, "user-agent"), "leasecron-typescript/0.1.0");
  assert.equal(header(r, "content-type"), withBody ? "application/json" : undefined);
}

/** Awaits p, which must reject, and returns what it rejected with. */
async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail("expected a rejection");
}

test("schedule POSTs the spec to /api/v1/tasks with the headers and returns the task", async (t) => {
  const s = await serve(t, json(201, { task }));
  const spec = { type: "email", payload: { to: "a@example.com" }, in: "10m", priority: "high" as const, after: ["x"] };
  const got = await s.client().schedule(spec, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
  assert.deepEqual(got, task);
  assert.equal(s.requests.length, 1);
  const r = s.requests[0]!;
  assert.equal(r.method, "POST");
  assert.equal(r.url, "/api/v1/tasks");
  assert.deepEqual(JSON.parse(r.body), spec);
  assertCommonHeaders(r, true);
  assert.equal(header(r, "traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  assert.equal(USER_AGENT, "leasecron-typescript/0.1.0");
});

test("scheduleMany POSTs to /api/v1/tasks:many and returns the results", async (t) => {
  const answer = {
    scheduled: 1,
    batch: "b1",
    results: [
      { index: 0, id: "a", status: "scheduled", due: "2030-01-01T00:00:00Z" },
      { index: 1, id: "b", status: "held", holder: "old", error: "unique key held" },
    ],
  };
  const s = await serve(t, json(200, answer));
  const req = {
    tasks: [{ id: "a", type: "t" }, { id: "b", type: "t", unique_key: "k" }],
    partial: true,
    batch: "b1",
    on_complete: { type: "done", payload: "all" },
  };
  const got = await s.client().scheduleMany(req);
  assert.deepEqual(got, answer);
  const r = s.requests[0]!;
  assert.equal(r.method, "POST");
  assert.equal(r.url, "/api/v1/tasks:many");
  assert.deepEqual(JSON.parse(r.body), req);
  assertCommonHeaders(r, true);
});

test("status GETs /api/v1/tasks/{id} with the id encoded", async (t) => {
  const answer: TaskStatus = { id: "a/b c?", state: "running", run: run("running") };
  const s = await serve(t, json(200, answer));
  const got = await s.client().status("a/b c?");
  assert.deepEqual(got, answer);
  const r = s.requests[0]!;
  assert.equal(r.method, "GET");
  assert.equal(r.url, "/api/v1/tasks/a%2Fb%20c%3F");
  assert.equal(r.body, "");
  assertCommonHeaders(r, false);
});

test("cancel POSTs /api/v1/tasks/{id}/cancel without a body", async (t) => {
  const s = await serve(t, json(200, { id: "t1", removed: true, marked: false }));
  const got = await s.client().cancel("t1");
  assert.deepEqual(got, { id: "t1", removed: true, marked: false });
  const r = s.requests[0]!;
  assert.equal(r.method, "POST");
  assert.equal(r.url, "/api/v1/tasks/t1/cancel");
  assert.equal(r.body, "");
  assertCommonHeaders(r, false);
});

test("reschedule POSTs {in} or {at} to /api/v1/tasks/{id}/reschedule", async (t) => {
  const s = await serve(t, json(200, { task }));
  const c = s.client();
  assert.deepEqual(await c.reschedule("t#1", { in: "10m" }), task);
  assert.deepEqual(await c.reschedule("t#1", { at: "2030-01-01T00:00:00Z" }), task);
  assert.equal(s.requests[0]!.method, "POST");
  assert.equal(s.requests[0]!.url, "/api/v1/tasks/t%231/reschedule");
  assert.deepEqual(JSON.parse(s.requests[0]!.body), { in: "10m" });
  assert.deepEqual(JSON.parse(s.requests[1]!.body), { at: "2030-01-01T00:00:00Z" });
  assertCommonHeaders(s.requests[0]!, true);
  await assert.rejects(c.reschedule("t1", {}), TypeError);
  await assert.rejects(c.reschedule("t1", { at: "2030-01-01T00:00:00Z", in: "1m" }), TypeError);
  assert.equal(s.requests.length, 2);
});

test("replace PUTs the spec to /api/v1/tasks/{id}", async (t) => {
  const s = await serve(t, json(200, { task }));
  const spec = { type: "email", at: "2030-01-01T00:00:00Z", unique_key: "k", unique_for: "1h" };
  assert.deepEqual(await s.client().replace("t1", spec), task);
  const r = s.requests[0]!;
  assert.equal(r.method, "PUT");
  assert.equal(r.url, "/api/v1/tasks/t1");
  assert.deepEqual(JSON.parse(r.body), spec);
  assertCommonHeaders(r, true);
});

test("health, runs and batch GET their routes; runs sends its query", async (t) => {
  const health = { status: "ok", leader: "w1", instances: 2, queue_depth: 0, dead_letters: 0, due_count: 0, due_lag_seconds: 0, paused_types: [] };
  const runs = { runs: [run("dead")], continue: "c2" };
  const batch = { id: "b/1", counts: { total: 2, succeeded: 1, dead: 0, cancelled: 0 }, pending: 1, sealed: true, complete: false, created: "2030-01-01T00:00:00Z" };
  const s = await serve(t, json(200, health), json(200, runs), json(200, batch));
  const c = s.client({ baseUrl: `${s.url}/api/v1/` });
  assert.equal(c.baseUrl, `${s.url}/api/v1`);
  assert.deepEqual(await c.health(), health);
  assert.deepEqual(await c.runs({ state: "dead", type: "email job", limit: 10, continue: "c1", batch: undefined }), runs);
  assert.deepEqual(await c.batch("b/1"), batch);
  assert.deepEqual(
    s.requests.map((r) => `${r.method} ${r.url}`),
    ["GET /api/v1/health", "GET /api/v1/runs?state=dead&type=email+job&limit=10&continue=c1", "GET /api/v1/batches/b%2F1"],
  );
});

test("a base path before /api/v1 is kept", async (t) => {
  const s = await serve(t, json(200, { status: "ok" }));
  await s.client({ baseUrl: `${s.url}/leasecron/` }).health();
  assert.equal(s.requests[0]!.url, "/leasecron/api/v1/health");
});

test("503 with Retry-After: 1 is retried after about a second, then succeeds", async (t) => {
  const s = await serve(t, problem(503, "unavailable", {}, { "Retry-After": "1" }), json(201, { task }));
  const started = Date.now();
  // No id: a POST the server may not have done; 503 is retried anyway.
  const got = await s.client({ maxBackoffMs: 30_000 }).schedule({ type: "email" });
  const took = Date.now() - started;
  assert.deepEqual(got, task);
  assert.equal(s.requests.length, 2);
  const gap = s.requests[1]!.at - s.requests[0]!.at;
  assert.ok(gap >= 950 && gap < 2500, `retried after ${gap} ms`);
  assert.ok(took < 3000, `took ${took} ms`);
  assert.equal(s.requests[1]!.body, s.requests[0]!.body);
});

test("429 without Retry-After backs off exponentially, then succeeds", async (t) => {
  const s = await serve(t, problem(429, "too-many-requests"), problem(429, "too-many-requests"), json(200, { status: "ok" }));
  const got = await s.client({ backoffMs: 40, maxBackoffMs: 1000 }).health();
  assert.deepEqual(got, { status: "ok" });
  assert.equal(s.requests.length, 3);
  const first = s.requests[1]!.at - s.requests[0]!.at;
  const second = s.requests[2]!.at - s.requests[1]!.at;
  // Equal jitter: between half and all of 40 ms, then of 80 ms.
  assert.ok(first >= 15 && first < 500, `first wait ${first} ms`);
  assert.ok(second >= 35 && second < 500, `second wait ${second} ms`);
});

test("Retry-After is capped at maxBackoffMs, and an HTTP date in the past retries at once", async (t) => {
  const past = new Date(Date.now() - 60_000).toUTCString();
  const s = await serve(
    t,
    problem(503, "unavailable", {}, { "Retry-After": "120" }),
    problem(503, "unavailable", {}, { "Retry-After": past }),
    json(200, { status: "ok" }),
  );
  const started = Date.now();
  await s.client({ maxBackoffMs: 100 }).health();
  assert.equal(s.requests.length, 3);
  assert.ok(Date.now() - started < 1000);
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6000);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(null), undefined);
});

test("retries stop after `retries` and the last answer is thrown", async (t) => {
  const s = await serve(t, problem(503, "unavailable", { detail: "storage is throttling" }, { "Retry-After": "0" }));
  const err = await failure(s.client({ retries: 2 }).status("t1"));
  assert.equal(s.requests.length, 3);
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 503);
  assert.equal(err.type, "urn:leasecron:problem:unavailable");
  assert.equal(err.detail, "storage is throttling");
  assert.equal(err.retryAfterMs, 0);
  assert.match(err.message, /GET \/api\/v1\/tasks\/t1: 503 unavailable: storage is throttling/);

  const none = await serve(t, problem(429, "too-many-requests"));
  await assert.rejects(none.client({ retries: 0 }).health(), ApiError);
  assert.equal(none.requests.length, 1);
});

test("problem+json maps to the error classes, with field, accepted, holder and errors", async (t) => {
  const cases: Array<[Script, Function, string]> = [
    [problem(400, "invalid-field", { field: "in", accepted: "a Go duration such as 90s, 10m or 1h30m" }), InvalidError, "invalid-field"],
    [problem(401, "unauthorized"), UnauthorizedError, "unauthorized"],
    [problem(403, "forbidden"), ForbiddenError, "forbidden"],
    [problem(404, "not-found"), NotFoundError, "not-found"],
    [problem(409, "conflict"), ConflictError, "conflict"],
    [problem(409, "unique-key-held", { holder: "older-task" }), UniqueKeyHeldError, "unique-key-held"],
    [problem(413, "too-large"), InvalidError, "too-large"],
    [problem(415, "unsupported-media-type"), InvalidError, "unsupported-media-type"],
    [problem(422, "invalid-tasks", { errors: [{ index: 1, field: "type", detail: "required" }] }), InvalidError, "invalid-tasks"],
    [problem(500, "internal"), ApiError, "internal"],
  ];
  const s = await serve(t, ...cases.map(([script]) => script));
  const c = s.client({ retries: 0 });
  const errs: unknown[] = [];
  for (let i = 0; i < cases.length; i++) errs.push(await failure(c.schedule({ type: "email" })));
  for (const [i, [, cls, kind]] of cases.entries()) {
    const err = errs[i];
    assert.ok(err instanceof cls, `${kind}: got ${String(err)}`);
    assert.ok(err instanceof ApiError);
    assert.equal(err.constructor, cls, kind);
    assert.equal(err.type, `urn:leasecron:problem:${kind}`);
    assert.equal(err.title, kind);
    assert.equal(err.detail, `${kind} happened`);
    assert.equal(err.problem.status, err.status);
    assert.equal(err.request, "POST /api/v1/tasks");
  }
  const invalid = errs[0] as InvalidError;
  assert.equal(invalid.status, 400);
  assert.equal(invalid.field, "in");
  assert.equal(invalid.accepted, "a Go duration such as 90s, 10m or 1h30m");
  assert.equal(invalid.name, "InvalidError");
  const held = errs[5] as UniqueKeyHeldError;
  assert.ok(held instanceof ConflictError);
  assert.equal(held.holder, "older-task");
  assert.ok(!((errs[4] as ConflictError) instanceof UniqueKeyHeldError));
  assert.deepEqual((errs[8] as InvalidError).errors, [{ index: 1, field: "type", detail: "required" }]);
  assert.equal((errs[8] as InvalidError).status, 422);
});

test("a body that is not problem details still throws with the status and the text", async (t) => {
  const s = await serve(t, (_req, res) => {
    res.writeHead(502, { "Content-Type": "text/html" });
    res.end("<html>Bad Gateway from the proxy</html>");
  });
  const err = await failure(s.client({ retries: 0 }).health());
  assert.ok(err instanceof ApiError);
  assert.equal(err.constructor, ApiError);
  assert.equal(err.status, 502);
  assert.equal(err.type, "about:blank");
  assert.equal(err.title, "Bad Gateway");
  assert.equal(err.detail, "<html>Bad Gateway from the proxy</html>");
  assert.match(err.message, /502 Bad Gateway: <html>Bad Gateway from the proxy<\/html>/);
});

test("wait polls status until the run succeeded", async (t) => {
  const status = (state: RunState): Script => json(200, { id: "t1", state, task, run: run(state) });
  const s = await serve(t, json(200, { id: "t1", state: "scheduled", task }), status("queued"), status("running"), status("succeeded"));
  const got = await s.client().wait("t1", { pollMs: 20, timeoutMs: 5000 });
  assert.equal(got.run?.state, "succeeded");
  assert.equal(s.requests.length, 4);
  assert.ok(s.requests.every((r) => r.method === "GET" && r.url === "/api/v1/tasks/t1"));

  const custom = await serve(t, status("queued"), status("running"));
  assert.equal((await custom.client().wait("t1", { pollMs: 10, states: ["running"] })).run?.state, "running");
});

test("wait throws a TimeoutError with the last status when the run does not end in time", async (t) => {
  const s = await serve(t, json(200, { id: "t1", state: "running", run: run("running") }));
  const started = Date.now();
  const err = await failure(s.client().wait("t1", { pollMs: 50, timeoutMs: 300 }));
  const took = Date.now() - started;
  assert.ok(err instanceof TimeoutError, String(err));
  assert.equal(err.timeoutMs, 300);
  assert.equal(err.lastStatus?.run?.state, "running");
  assert.match(err.message, /task t1 did not reach succeeded, dead, cancelled within 300 ms \(last state: running\)/);
  assert.ok(took >= 300 && took < 1500, `took ${took} ms`);
  assert.ok(s.requests.length >= 2 && s.requests.length <= 9, `${s.requests.length} polls`);
});

test("a request times out against a slow handler", async (t) => {
  const s = await serve(t, hang);
  const started = Date.now();
  // No id: a POST that may have been done is not retried after a timeout.
  const err = await failure(s.client({ timeoutMs: 200 }).schedule({ type: "email" }));
  const took = Date.now() - started;
  assert.ok(err instanceof TimeoutError, String(err));
  assert.equal(err.timeoutMs, 200);
  assert.match(err.message, /POST \/api\/v1\/tasks: no answer within 200 ms/);
  assert.ok(took >= 190 && took < 1500, `took ${took} ms`);
  assert.equal(s.requests.length, 1);
});

test("a timed-out request is retried when it is idempotent", async (t) => {
  // A batch's first call seals it: the server answers a repeat as the first.
  const many = await serve(t, hang, json(200, { scheduled: 1, results: [] }));
  await many.client({ timeoutMs: 150 }).scheduleMany({ tasks: [{ id: "a", type: "t" }], batch: "b1" });
  assert.equal(many.requests.length, 2);

  const get = await serve(t, hang, hang, hang);
  await assert.rejects(get.client({ timeoutMs: 100, retries: 2 }).status("t1"), TimeoutError);
  assert.equal(get.requests.length, 3);
});

test("startBulk names the operation and is retried after a timeout with the same id", async (t) => {
  const bulk = { id: "", op: { kind: "cancel-pending", filter: { type: "t" } }, expect: 2, done: 0, failed: 0, state: "running", attempts: 0, created: "2030-01-01T00:00:00Z", updated: "2030-01-01T00:00:00Z" };
  const s = await serve(t, hang, (req, res) => {
    res.writeHead(202, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ ...bulk, id: JSON.parse(req.body).id }));
  });
  const got = await s.client({ timeoutMs: 150 }).startBulk({ kind: "cancel-pending", type: "t", expect: 2 });
  assert.equal(s.requests.length, 2);
  const [first, second] = s.requests.map((r) => JSON.parse(r.body));
  assert.match(first.id, /^bulk-[0-9a-f-]{36}$/);
  assert.deepEqual(second, first, "the resend is the same request, id and all");
  assert.equal(got.id, first.id);
  assert.equal(s.requests[0]?.url, "/api/v1/bulk");

  // An id of the caller's is sent as given.
  const named = await serve(t, json(202, { ...bulk, id: "bulk-mine" }));
  await named.client().startBulk({ id: "bulk-mine", kind: "requeue-dead", since: "24h", expect: 0 });
  assert.equal(JSON.parse(named.requests[0]?.body ?? "{}").id, "bulk-mine");
  // An empty id is none to the server: the client draws one.
  const empty = await serve(t, json(202, { ...bulk, id: "x" }));
  await empty.client().startBulk({ id: "", kind: "cancel-pending", expect: 0 });
  assert.match(JSON.parse(empty.requests[0]?.body ?? "{}").id, /^bulk-[0-9a-f-]{36}$/);

  const reads = await serve(t, json(200, bulk), json(200, { operations: [bulk] }));
  const c = reads.client();
  await c.bulk("bulk-a/b");
  await c.bulks();
  assert.deepEqual(reads.requests.map((r) => `${r.method} ${r.url}`), ["GET /api/v1/bulk/bulk-a%2Fb", "GET /api/v1/bulk"]);
});

test("a timed-out schedule is not retried, id or not", async (t) => {
  // A task due now may have run by the time a resend arrives, and the resend
  // would schedule it again (a review found a retried POST run its task
  // twice): status tells whether the first request took effect.
  const one = await serve(t, hang, json(201, { task }));
  await assert.rejects(one.client({ timeoutMs: 150 }).schedule({ id: "t1", type: "email" }), TimeoutError);
  assert.equal(one.requests.length, 1);

  const put = await serve(t, hang, json(200, { task }));
  await assert.rejects(put.client({ timeoutMs: 150 }).replace("t1", { type: "email" }), TimeoutError);
  assert.equal(put.requests.length, 1);

  const many = await serve(t, hang, json(200, { scheduled: 1, results: [] }));
  await assert.rejects(many.client({ timeoutMs: 150 }).scheduleMany({ tasks: [{ id: "a", type: "t" }] }), TimeoutError);
  assert.equal(many.requests.length, 1);

  const anonymous = await serve(t, hang, json(200, { scheduled: 1, results: [] }));
  await assert.rejects(anonymous.client({ timeoutMs: 150 }).scheduleMany({ tasks: [{ id: "a", type: "t" }, { type: "t" }] }), TimeoutError);
  assert.equal(anonymous.requests.length, 1);

  // An empty batch is none to the server: nothing seals it.
  const empty = await serve(t, hang, json(200, { scheduled: 1, results: [] }));
  await assert.rejects(empty.client({ timeoutMs: 150 }).scheduleMany({ tasks: [{ id: "a", type: "t" }], batch: "" }), TimeoutError);
  assert.equal(empty.requests.length, 1);
});

test("a schedule answered 500 outcome-unknown is thrown after one try, naming the task", async (t) => {
  // The server answers it when a write storage did not answer may have been
  // made (docs/api.md); sent again, a task due now that ran would be
  // scheduled a second time. problem.id names the task to look up.
  const s = await serve(t, problem(500, "outcome-unknown", { id: "t1" }), json(201, { task }));
  const err = await failure(s.client().schedule({ id: "t1", type: "email" }));
  assert.equal(s.requests.length, 1);
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 500);
  assert.equal(err.type, "urn:leasecron:problem:outcome-unknown");
  assert.equal(err.problem.id, "t1");
});

test("the token never appears in error messages", async (t) => {
  // A server (or proxy) that echoes the Authorization header back.
  const echo: Script = (req, res) => {
    res.writeHead(401, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ type: "urn:leasecron:problem:unauthorized", title: "Unauthorized", status: 401, detail: `bad ${header(req, "authorization")} (secret ${TOKEN.split(".")[2]})` }));
  };
  const echoText: Script = (req, res) => {
    res.writeHead(500, { "Content-Type": "text/plain" });
    res.end(`got ${header(req, "authorization")}`);
  };
  const s = await serve(t, echo, echoText, hang);
  const c = s.client({ retries: 0, timeoutMs: 100 });
  const errs = [await failure(c.health()), await failure(c.health()), await failure(c.health())];

  // A port nothing listens on: the connection is refused.
  const port = await freePort();
  errs.push(await failure(new LeasecronClient({ baseUrl: `http://127.0.0.1:${port}`, token: TOKEN, retries: 1, backoffMs: 10 }).health()));

  assert.ok(errs[0] instanceof UnauthorizedError);
  assert.ok(errs[1] instanceof ApiError && errs[1].status === 500);
  assert.ok(errs[2] instanceof TimeoutError);
  assert.ok(errs[3] instanceof NetworkError, String(errs[3]));
  const secret = TOKEN.split(".")[2]!;
  for (const err of errs) {
    assert.ok(err instanceof Error);
    for (const text of [err.message, String(err), err.stack ?? "", JSON.stringify(err), JSON.stringify((err as Partial<ApiError>).problem ?? {})]) {
      assert.doesNotMatch(text, new RegExp(secret.replace(/[-.]/g, "\\$&")));
    }
  }
  assert.match((errs[0] as ApiError).detail, /bad Bearer \[redacted\] \(secret \[redacted\]\)/);
  assert.equal((errs[1] as ApiError).detail, "got Bearer [redacted]");
  assert.throws(() => new LeasecronClient({ baseUrl: "http://x", token: "lct.a.b\n" }), (e: unknown) => e instanceof TypeError && !e.message.includes("lct.a.b"));
});

test("options are checked, and a custom fetch is used", async () => {
  assert.throws(() => new LeasecronClient({ baseUrl: "", token: TOKEN }), TypeError);
  assert.throws(() => new LeasecronClient({ baseUrl: "not a url", token: TOKEN }), TypeError);
  assert.throws(() => new LeasecronClient({ baseUrl: "http://x", token: "" }), TypeError);
  assert.throws(() => new LeasecronClient({ baseUrl: "http://x", token: TOKEN, retries: -1 }), TypeError);
  const seen: string[] = [];
  const c = new LeasecronClient({
    baseUrl: "https://leasecron.example.com",
    token: TOKEN,
    fetch: async (url, init) => {
      seen.push(`${init.method} ${url}`);
      return new Response(JSON.stringify({ status: "ok" }), { status: 200, headers: { "Content-Type": "application/json" } });
    },
  });
  assert.deepEqual(await c.health(), { status: "ok" });
  assert.deepEqual(seen, ["GET https://leasecron.example.com/api/v1/health"]);
  await assert.rejects(c.status(""), TypeError);
});
