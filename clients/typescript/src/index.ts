/**
 * `@leasecron/client`: a client for the leasecron HTTP API (`/api/v1`).
 *
 * It schedules, inspects, waits for, reschedules, replaces and cancels
 * tasks over plain HTTP and JSON, with no runtime dependency: it uses the
 * global `fetch`, `AbortController` and `setTimeout` (Node 18 or later, or
 * any browser-like runtime).
 *
 * Every request has its own timeout. 429 and 503 answers are retried,
 * honouring `Retry-After`; network errors and timeouts are retried only for
 * requests that are safe to repeat (GET, and a batch's schedule whose tasks
 * all carry an explicit id, which the server answers as the first once the
 * batch is sealed). Error answers
 * (RFC 9457 problem details) become {@link ApiError} and its subclasses.
 *
 * @example
 * ```ts
 * import { LeasecronClient } from "@leasecron/client";
 *
 * const client = new LeasecronClient({ baseUrl: "https://leasecron.example.com", token: process.env.LEASECRON_TOKEN! });
 * const task = await client.schedule({ type: "email", payload: { to: "a@example.com" }, in: "10s" });
 * const done = await client.wait(task.id, { timeoutMs: 120_000 });
 * console.log(done.run?.state);
 * ```
 *
 * @packageDocumentation
 */

import type {
  BatchStatus,
  Bulk,
  BulkList,
  BulkRequest,
  CancelResult,
  Health,
  Problem,
  RescheduleRequest,
  RunState,
  RunsPage,
  RunsQuery,
  ScheduleManyRequest,
  ScheduleManyResult,
  Task,
  TaskAnswer,
  TaskError,
  TaskSpec,
  TaskStatus,
} from "./types.js";

export type {
  BatchCounts,
  BatchStatus,
  Bulk,
  BulkFilter,
  BulkKind,
  BulkList,
  BulkRequest,
  CancelResult,
  Health,
  OnComplete,
  PriorityName,
  Problem,
  RescheduleRequest,
  Run,
  RunProgress,
  RunState,
  RunsPage,
  RunsQuery,
  ScheduleManyRequest,
  ScheduleManyResult,
  ScheduleResult,
  ScheduleStatus,
  Task,
  TaskAnswer,
  TaskError,
  TaskSpec,
  TaskStatus,
} from "./types.js";

/** The version of this client package. */
export const VERSION = "0.1.0";

/** The `User-Agent` the client sends: `leasecron-typescript/0.1.0`. */
export const USER_AGENT = `leasecron-typescript/${VERSION}`;

/** The path of the API under a server's base address. */
export const API_PATH = "/api/v1";

/** The prefix of every leasecron problem type. */
export const PROBLEM_TYPE_PREFIX = "urn:leasecron:problem:";

/** The final run states: those {@link LeasecronClient.wait} waits for by default. */
export const TERMINAL_STATES: readonly RunState[] = Object.freeze(["succeeded", "dead", "cancelled"] as const);

/**
 * A `fetch` implementation: the global `fetch` or anything that behaves like
 * it for a URL string and a `RequestInit` (method, headers, body, signal).
 */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** Options of {@link LeasecronClient}. */
export interface ClientOptions {
  /**
   * The server's address, for example `https://leasecron.example.com` or
   * `http://127.0.0.1:8080/leasecron` behind a base path. `/api/v1` is
   * appended unless the address already ends with it.
   */
  baseUrl: string;
  /**
   * The API token (`lct.NAME.SECRET`), from
   * `leasecron tokens create NAME --role ROLE`. Sent as
   * `Authorization: Bearer TOKEN`; never included in error messages.
   */
  token: string;
  /** Timeout of each attempt of a request, in milliseconds (default 10000). */
  timeoutMs?: number;
  /** How many times a request is retried after the first attempt (default 5). */
  retries?: number;
  /** Base of the exponential backoff between retries, in milliseconds (default 500). */
  backoffMs?: number;
  /** Longest wait between two attempts, in milliseconds (default 30000); it caps `Retry-After` too. */
  maxBackoffMs?: number;
  /** The `fetch` to use (default: the global `fetch`). */
  fetch?: FetchLike;
}

/** Options of {@link LeasecronClient.schedule}. */
export interface ScheduleOptions {
  /** A W3C `traceparent` header value linking the scheduled task to the caller's trace. */
  traceparent?: string;
}

/** Options of {@link LeasecronClient.wait}. */
export interface WaitOptions {
  /** How long to wait in all, in milliseconds (default 60000). */
  timeoutMs?: number;
  /** Interval between two status polls, in milliseconds (default 500). */
  pollMs?: number;
  /** The run states to wait for (default {@link TERMINAL_STATES}: `succeeded`, `dead`, `cancelled`). */
  states?: readonly RunState[];
}

/** How an {@link ApiError} came about, besides its problem details. */
export interface ApiErrorInit {
  /** The request that failed, as `METHOD /api/v1/path`. */
  request: string;
  /** The answer's HTTP status (default: the problem's `status`). */
  status?: number;
  /** The answer's `Retry-After`, in milliseconds. */
  retryAfterMs?: number;
}

/**
 * An error answer of the API: a non-2xx status, with the RFC 9457 problem
 * details the server sent (or, for a body that is not problem details, one
 * made from the status and the body's text).
 *
 * Subclasses name the common cases: {@link UnauthorizedError} (401),
 * {@link ForbiddenError} (403), {@link NotFoundError} (404),
 * {@link ConflictError} (409) and its {@link UniqueKeyHeldError}, and
 * {@link InvalidError} (400, 413, 415, 422). Other statuses (429 and 503
 * once retries are spent, 5xx) are plain `ApiError`s.
 */
export class ApiError extends Error {
  /** The HTTP status code. */
  readonly status: number;
  /** The problem type, for example `urn:leasecron:problem:not-found` (`about:blank` for a body that is not problem details). */
  readonly type: string;
  /** The problem's short summary. */
  readonly title: string;
  /** What went wrong this time ("" when the server did not say). */
  readonly detail: string;
  /** The field or parameter that is wrong, when the server names one. */
  readonly field?: string;
  /** The whole problem details object. */
  readonly problem: Problem;
  /** The request that failed, as `METHOD /api/v1/path`. */
  readonly request: string;
  /** The wait the server asked for with `Retry-After`, in milliseconds, when it did. */
  readonly retryAfterMs?: number;

  /**
   * @param problem - the problem details of the answer
   * @param init - the request, and the answer's status and `Retry-After`
   */
  constructor(problem: Problem, init: ApiErrorInit) {
    const status = init.status ?? problem.status;
    const detail = typeof problem.detail === "string" ? problem.detail : "";
    super(`${init.request}: ${status} ${problem.title}${detail ? `: ${detail}` : ""}`);
    this.name = "ApiError";
    this.status = status;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = detail;
    if (typeof problem.field === "string") this.field = problem.field;
    this.problem = problem;
    this.request = init.request;
    if (init.retryAfterMs !== undefined) this.retryAfterMs = init.retryAfterMs;
  }
}

/** 401 `unauthorized`: no token, or an unknown or revoked one. */
export class UnauthorizedError extends ApiError {
  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "UnauthorizedError";
  }
}

/** 403 `forbidden`: the token's role or types do not allow the request. */
export class ForbiddenError extends ApiError {
  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "ForbiddenError";
  }
}

/** 404 `not-found`: no such task, batch, bulk operation or dead letter. */
export class NotFoundError extends ApiError {
  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "NotFoundError";
  }
}

/**
 * 409: the id is taken by a different task (`conflict`), or, as the
 * subclass {@link UniqueKeyHeldError}, the unique key is held by a live task.
 */
export class ConflictError extends ApiError {
  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "ConflictError";
  }
}

/** 409 `unique-key-held`: the task's unique key is held by a live task, named by {@link UniqueKeyHeldError.holder}. */
export class UniqueKeyHeldError extends ConflictError {
  /** The id of the live task holding the key ("" when the server did not say). */
  readonly holder: string;

  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "UniqueKeyHeldError";
    this.holder = typeof problem.holder === "string" ? problem.holder : "";
  }
}

/**
 * The request was refused as invalid: 400 (`invalid-field`,
 * `invalid-body`), 413 (`too-large`), 415 (`unsupported-media-type`) or 422
 * (`invalid-tasks`, with {@link InvalidError.errors}).
 */
export class InvalidError extends ApiError {
  /** What the wrong field accepts, when the server says. */
  readonly accepted?: string;
  /** For 422 `invalid-tasks`: each invalid task's index, field and detail. */
  readonly errors?: TaskError[];

  /** See {@link ApiError}. */
  constructor(problem: Problem, init: ApiErrorInit) {
    super(problem, init);
    this.name = "InvalidError";
    if (typeof problem.accepted === "string") this.accepted = problem.accepted;
    if (Array.isArray(problem.errors)) this.errors = problem.errors;
  }
}

/**
 * A time limit passed: one attempt of a request got no answer within the
 * client's `timeoutMs` (and was not retried, or every retry timed out too),
 * or {@link LeasecronClient.wait} did not see the states it waits for in
 * time (then {@link TimeoutError.lastStatus} is the last status it read).
 */
export class TimeoutError extends Error {
  /** The time limit that passed, in milliseconds. */
  readonly timeoutMs: number;
  /** For {@link LeasecronClient.wait}: the last status read. */
  readonly lastStatus?: TaskStatus;

  /**
   * @param message - what timed out
   * @param timeoutMs - the limit, in milliseconds
   * @param lastStatus - for a wait, the last status read
   */
  constructor(message: string, timeoutMs: number, lastStatus?: TaskStatus) {
    super(message);
    this.name = "TimeoutError";
    this.timeoutMs = timeoutMs;
    if (lastStatus !== undefined) this.lastStatus = lastStatus;
  }
}

/**
 * The request could not be made or its answer not read (connection refused
 * or reset, DNS failure, …), and it was not retried or every retry failed
 * too. `cause` is the error `fetch` threw.
 */
export class NetworkError extends Error {
  /**
   * @param message - what failed
   * @param cause - the underlying error
   */
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "NetworkError";
  }
}

/** The resolved options of a client. */
interface Settings {
  readonly base: string;
  readonly token: string;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  readonly fetch: FetchLike;
}

/** One request, as {@link LeasecronClient} sends it. */
interface Call {
  readonly method: "GET" | "POST" | "PUT";
  readonly path: string;
  readonly query?: Record<string, string | number | boolean | undefined>;
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
  /** Whether a network error or timeout may be retried (default: GET and PUT). */
  readonly idempotent?: boolean;
}

/**
 * A client of the leasecron HTTP API.
 *
 * Methods return the answer's JSON, typed, and throw {@link ApiError} (or a
 * subclass) for an error answer, {@link TimeoutError} when an attempt timed
 * out and {@link NetworkError} when the server could not be reached, once
 * retries are spent.
 */
export class LeasecronClient {
  readonly #s: Settings;

  /**
   * @param options - the server, the token, and optionally timeouts, retries and `fetch`
   * @throws TypeError when `baseUrl` or `token` is missing or malformed, or a number option is negative
   */
  constructor(options: ClientOptions) {
    const { baseUrl, token } = options ?? ({} as ClientOptions);
    if (typeof baseUrl !== "string" || baseUrl === "") throw new TypeError("LeasecronClient: baseUrl is required");
    let parsed: URL;
    try {
      parsed = new URL(baseUrl);
    } catch {
      throw new TypeError("LeasecronClient: baseUrl is not an absolute URL");
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError("LeasecronClient: baseUrl must be http: or https:");
    }
    if (typeof token !== "string" || token === "") throw new TypeError("LeasecronClient: token is required");
    // A token that is not a valid header value would make fetch throw an
    // error that quotes it; refuse it here without echoing it.
    if (/[\s\x00-\x1f\x7f]/.test(token)) {
      throw new TypeError("LeasecronClient: token must not contain whitespace or control characters");
    }
    let base = baseUrl.replace(/[?#].*$/, "").replace(/\/+$/, "");
    if (!base.endsWith(API_PATH)) base += API_PATH;
    const f = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (typeof f !== "function") throw new TypeError("LeasecronClient: no fetch: pass options.fetch or use Node 18 or later");
    this.#s = {
      base,
      token,
      timeoutMs: positive("timeoutMs", options.timeoutMs ?? 10_000),
      retries: Math.floor(nonNegative("retries", options.retries ?? 5)),
      backoffMs: nonNegative("backoffMs", options.backoffMs ?? 500),
      maxBackoffMs: nonNegative("maxBackoffMs", options.maxBackoffMs ?? 30_000),
      fetch: f,
    };
  }

  /** The API's base address the client sends to, ending in `/api/v1`. */
  get baseUrl(): string {
    return this.#s.base;
  }

  /**
   * Schedules one task (`POST /tasks`).
   *
   * A network error or timeout is thrown, not retried, id or not: the server
   * answers a repeated identical POST as the first only while the task is
   * pending, and a task due now may have run by the time a resend arrives,
   * which would schedule it again. {@link LeasecronClient.status} tells whether the
   * first request took effect.
   *
   * @param spec - the task; only `type` is required
   * @param opts - `traceparent` to link the task to the caller's trace
   * @returns the task as scheduled
   * @throws {@link InvalidError} for an invalid spec, {@link ConflictError} when the id is taken by a different task, {@link UniqueKeyHeldError} when its unique key is held
   */
  async schedule(spec: TaskSpec, opts: ScheduleOptions = {}): Promise<Task> {
    const headers: Record<string, string> = {};
    if (opts.traceparent) headers["traceparent"] = opts.traceparent;
    const answer = await this.#request<TaskAnswer>({
      method: "POST",
      path: "/tasks",
      body: spec,
      headers,
      idempotent: false,
    });
    return answer.task;
  }

  /**
   * Schedules many tasks in one request (`POST /tasks:many`), optionally as
   * a batch with a completion callback.
   *
   * Without `partial`, one invalid task refuses the request with an
   * {@link InvalidError} (422, `errors` lists them) and nothing is scheduled;
   * with it, each task's fate is in `results`. Retried after a network error
   * or timeout only for a `batch` whose tasks all have an `id` (its first
   * call seals it; without a batch, a task that ran since would be
   * scheduled again).
   *
   * @param req - the tasks, and `partial`, `batch`, `on_complete`
   * @returns how many were scheduled and one result per task
   */
  async scheduleMany(req: ScheduleManyRequest): Promise<ScheduleManyResult> {
    const tasks = Array.isArray(req?.tasks) ? req.tasks : [];
    return this.#request<ScheduleManyResult>({
      method: "POST",
      path: "/tasks:many",
      body: req,
      idempotent: !!req?.batch && tasks.length > 0 && tasks.every(hasId),
    });
  }

  /**
   * Reads a task's status (`GET /tasks/{id}`): its pending task and its run
   * record, each when it exists.
   *
   * @param id - the task id
   * @throws {@link NotFoundError} when there is neither
   */
  async status(id: string): Promise<TaskStatus> {
    return this.#request<TaskStatus>({ method: "GET", path: `/tasks/${pathId(id)}` });
  }

  /**
   * Cancels a task (`POST /tasks/{id}/cancel`): removes it when pending,
   * marks its run cancelled when queued or running.
   *
   * @param id - the task id
   * @returns whether it was removed and whether its run was marked
   * @throws {@link NotFoundError} when nothing was there
   */
  async cancel(id: string): Promise<CancelResult> {
    return this.#request<CancelResult>({ method: "POST", path: `/tasks/${pathId(id)}/cancel` });
  }

  /**
   * Moves a pending task to a new due time (`POST /tasks/{id}/reschedule`).
   *
   * @param id - the task id
   * @param when - exactly one of `at` (RFC 3339) or `in` (Go duration such as `10m`)
   * @returns the task as rescheduled
   * @throws TypeError unless exactly one of `at` and `in` is given
   */
  async reschedule(id: string, when: RescheduleRequest): Promise<Task> {
    const hasAt = when?.at !== undefined && when.at !== "";
    const hasIn = when?.in !== undefined && when.in !== "";
    if (hasAt === hasIn) throw new TypeError("reschedule: give exactly one of at and in");
    const body: RescheduleRequest = hasAt ? { at: when.at } : { in: when.in };
    const answer = await this.#request<TaskAnswer>({
      method: "POST",
      path: `/tasks/${pathId(id)}/reschedule`,
      body,
    });
    return answer.task;
  }

  /**
   * Replaces a pending task by a new spec, or schedules it when there is
   * none (`PUT /tasks/{id}`).
   *
   * A network error or timeout is thrown, not retried, as for
   * {@link LeasecronClient.schedule}.
   *
   * @param id - the task id
   * @param spec - the new spec; its `id` must be empty or `id`
   * @returns the task as written
   */
  async replace(id: string, spec: TaskSpec): Promise<Task> {
    const answer = await this.#request<TaskAnswer>({ method: "PUT", path: `/tasks/${pathId(id)}`, body: spec, idempotent: false });
    return answer.task;
  }

  /**
   * Polls a task's status until its run is in one of `states` (by default a
   * final one: `succeeded`, `dead` or `cancelled`).
   *
   * @param id - the task id
   * @param opts - `timeoutMs` (default 60000), `pollMs` (default 500), `states`
   * @returns the first status whose `run.state` is one of `states`
   * @throws {@link TimeoutError} when `timeoutMs` passes first (its `lastStatus` is the last status read); {@link NotFoundError} when the task does not exist
   */
  async wait(id: string, opts: WaitOptions = {}): Promise<TaskStatus> {
    const timeoutMs = nonNegative("timeoutMs", opts.timeoutMs ?? 60_000);
    const pollMs = nonNegative("pollMs", opts.pollMs ?? 500);
    const states = opts.states ?? TERMINAL_STATES;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const st = await this.status(id);
      if (st.run && states.includes(st.run.state)) return st;
      const left = deadline - Date.now();
      if (left <= 0) {
        const last = st.run?.state ?? st.state;
        throw new TimeoutError(
          `task ${id} did not reach ${states.join(", ")} within ${timeoutMs} ms (last state: ${last})`,
          timeoutMs,
          st,
        );
      }
      await sleep(Math.min(pollMs, left));
    }
  }

  /** Reads the fleet's health (`GET /health`). */
  async health(): Promise<Health> {
    return this.#request<Health>({ method: "GET", path: "/health" });
  }

  /**
   * Lists run records (`GET /runs`), one page at a time; pass the answer's
   * `continue` back to read the next page.
   *
   * @param query - filters (`state`, `type`, `series`, `batch`) and paging (`limit`, `continue`)
   */
  async runs(query: RunsQuery = {}): Promise<RunsPage> {
    return this.#request<RunsPage>({ method: "GET", path: "/runs", query: { ...query } });
  }

  /**
   * Reads a batch's progress (`GET /batches/{id}`).
   *
   * @param id - the batch id
   * @throws {@link NotFoundError} when there is no such batch
   */
  async batch(id: string): Promise<BatchStatus> {
    return this.#request<BatchStatus>({ method: "GET", path: `/batches/${pathId(id)}` });
  }

  /**
   * Starts a bulk operation (`POST /bulk`, role operator): requeue dead
   * letters, cancel pending tasks or disable series that match a filter,
   * once the number matching equals `expect`. Without an `id` the client
   * draws one (`bulk-` and a UUID), so the request is retried as a GET is:
   * a resend finds the operation the first send started and starts
   * nothing. Follow it with {@link LeasecronClient.bulk}.
   *
   * @param req - the operation, its filter and the confirmed count
   * @returns the operation, `running`
   * @throws {@link ConflictError} when the count differs from `expect` (count again), or the id names another operation, or one whose own start failed before it ran (start it with another id)
   */
  async startBulk(req: BulkRequest): Promise<Bulk> {
    // An empty id is none to the server, which would draw one of its own:
    // a resend would then start a second operation.
    const body = { ...req, id: req.id || `bulk-${globalThis.crypto.randomUUID()}` };
    return this.#request<Bulk>({ method: "POST", path: "/bulk", body, idempotent: true });
  }

  /**
   * Reads a bulk operation's progress (`GET /bulk/{id}`).
   *
   * @param id - the operation id
   * @throws {@link NotFoundError} when there is no such operation
   */
  async bulk(id: string): Promise<Bulk> {
    return this.#request<Bulk>({ method: "GET", path: `/bulk/${pathId(id)}` });
  }

  /** Lists the bulk operations kept, newest first (`GET /bulk`). */
  async bulks(): Promise<BulkList> {
    return this.#request<BulkList>({ method: "GET", path: "/bulk" });
  }

  /** Sends one request, with timeouts and retries, and decodes its answer. */
  async #request<T>(call: Call): Promise<T> {
    const s = this.#s;
    const url = s.base + call.path + queryString(call.query);
    const what = `${call.method} ${API_PATH}${call.path}`;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${s.token}`,
      Accept: "application/json",
      "User-Agent": USER_AGENT,
      ...call.headers,
    };
    let body: string | undefined;
    if (call.body !== undefined) {
      body = JSON.stringify(call.body);
      headers["Content-Type"] = "application/json";
    }
    const idempotent = call.idempotent ?? (call.method === "GET" || call.method === "PUT");

    for (let attempt = 0; ; attempt++) {
      const ctrl = new AbortController();
      const timer = setTimeout(() => ctrl.abort(), s.timeoutMs);
      let res: Response;
      let text: string;
      try {
        const init: RequestInit = { method: call.method, headers, signal: ctrl.signal };
        if (body !== undefined) init.body = body;
        res = await s.fetch(url, init);
        text = await res.text();
      } catch (err) {
        const failure = ctrl.signal.aborted
          ? new TimeoutError(`${what}: no answer within ${s.timeoutMs} ms`, s.timeoutMs)
          : new NetworkError(this.#redact(`${what}: ${describe(err)}`), err);
        if (idempotent && attempt < s.retries) {
          await sleep(this.#backoff(attempt));
          continue;
        }
        throw failure;
      } finally {
        clearTimeout(timer);
      }

      const retryAfterMs = parseRetryAfter(res.headers.get("retry-after"));
      if ((res.status === 429 || res.status === 503) && attempt < s.retries) {
        await sleep(retryAfterMs !== undefined ? Math.min(retryAfterMs, s.maxBackoffMs) : this.#backoff(attempt));
        continue;
      }
      if (res.status >= 200 && res.status < 300) {
        if (text.trim() === "") return undefined as T;
        try {
          return JSON.parse(text) as T;
        } catch {
          const problem: Problem = {
            type: "about:blank",
            title: "Invalid JSON answer",
            status: res.status,
            detail: truncate(this.#redact(text.trim())),
          };
          throw new ApiError(problem, { request: what, status: res.status });
        }
      }
      const init: ApiErrorInit & { status: number } = { request: what, status: res.status };
      if (retryAfterMs !== undefined) init.retryAfterMs = retryAfterMs;
      throw errorFor(problemOf(res.status, res.statusText, this.#redact(text)), init);
    }
  }

  /** The wait before retry `attempt + 1`: exponential, with jitter, capped at maxBackoffMs. */
  #backoff(attempt: number): number {
    const cap = Math.min(this.#s.maxBackoffMs, this.#s.backoffMs * 2 ** attempt);
    return cap / 2 + Math.random() * (cap / 2);
  }

  /** `text` with the token, and its secret part, blotted out. */
  #redact(text: string): string {
    const token = this.#s.token;
    let out = text.split(token).join("[redacted]");
    const secret = /^lct\.[^.]+\.(.+)$/.exec(token)?.[1];
    if (secret && secret.length >= 8) out = out.split(secret).join("[redacted]");
    return out;
  }
}

/**
 * Parses a `Retry-After` header value: a number of seconds or an HTTP date.
 *
 * @param value - the header's value (null when absent)
 * @param now - the current time in milliseconds since the epoch (default `Date.now()`)
 * @returns the wait in milliseconds (0 for a date in the past), or undefined when absent or unreadable
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value == null) return undefined;
  const v = value.trim();
  if (v === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Math.round(Number(v) * 1000);
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

/** The problem details of an error answer: its body when it is one, else one made from the status and text. */
function problemOf(status: number, statusText: string, text: string): Problem {
  const fallbackTitle = statusText || `HTTP ${status}`;
  try {
    const v: unknown = JSON.parse(text);
    if (v !== null && typeof v === "object" && !Array.isArray(v)) {
      const o = v as Record<string, unknown>;
      if (typeof o["type"] === "string" || typeof o["title"] === "string") {
        return {
          ...o,
          type: typeof o["type"] === "string" ? o["type"] : "about:blank",
          title: typeof o["title"] === "string" ? o["title"] : fallbackTitle,
          status: typeof o["status"] === "number" ? o["status"] : status,
          detail: typeof o["detail"] === "string" ? o["detail"] : "",
        };
      }
    }
  } catch {
    // not JSON: fall through
  }
  return { type: "about:blank", title: fallbackTitle, status, detail: truncate(text.trim()) };
}

/**
 * The error for an error answer: its class follows the HTTP status (and,
 * for 409, the problem type).
 */
function errorFor(problem: Problem, init: ApiErrorInit & { status: number }): ApiError {
  switch (init.status) {
    case 401:
      return new UnauthorizedError(problem, init);
    case 403:
      return new ForbiddenError(problem, init);
    case 404:
      return new NotFoundError(problem, init);
    case 409:
      return problem.type.endsWith("unique-key-held")
        ? new UniqueKeyHeldError(problem, init)
        : new ConflictError(problem, init);
    case 400:
    case 413:
    case 415:
    case 422:
      return new InvalidError(problem, init);
    default:
      return new ApiError(problem, init);
  }
}

/** `query` as `?a=1&b=2`, leaving out undefined and empty values ("" without any). */
function queryString(query: Call["query"]): string {
  if (!query) return "";
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === "") continue;
    q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** `id` encoded for a path segment. */
function pathId(id: string): string {
  if (typeof id !== "string" || id === "") throw new TypeError("an id is required");
  return encodeURIComponent(id);
}

/** Whether a task spec carries an explicit id. */
function hasId(spec: TaskSpec): boolean {
  return typeof spec?.id === "string" && spec.id !== "";
}

/** A short description of an error `fetch` threw, with its cause's code or message. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  let msg = err.message || err.name;
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    msg += ` (${typeof code === "string" ? code : cause.message})`;
  }
  return msg;
}

/** `s` cut to at most 1000 characters. */
function truncate(s: string): string {
  return s.length > 1000 ? `${s.slice(0, 1000)}…` : s;
}

/** Waits `ms` milliseconds. */
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `v` when it is a finite number ≥ 0, else a TypeError naming `name`. */
function nonNegative(name: string, v: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new TypeError(`${name} must be a number ≥ 0`);
  return v;
}

/** `v` when it is a finite number > 0, else a TypeError naming `name`. */
function positive(name: string, v: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) throw new TypeError(`${name} must be a number > 0`);
  return v;
}
