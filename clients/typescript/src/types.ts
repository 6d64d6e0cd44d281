/**
 * Types of the JSON that the leasecron HTTP API (`/api/v1`) takes and
 * answers, as described in `docs/api.md`. Field names are exactly those on
 * the wire (snake_case). Times are RFC 3339 strings; durations are Go
 * duration strings such as `90s`, `10m` or `1h30m`.
 *
 * @packageDocumentation
 */

/**
 * The state of a run: where a task is in its life.
 *
 * `succeeded`, `dead` and `cancelled` are final.
 */
export type RunState =
  | "scheduled"
  | "queued"
  | "running"
  | "succeeded"
  | "failed"
  | "dead"
  | "cancelled"
  | "snoozed";

/** A priority level by name; `default` is the level when none is given. */
export type PriorityName = "critical" | "high" | "default" | "low";

/**
 * What `POST /tasks`, `PUT /tasks/{id}` and each entry of `POST /tasks:many`
 * take: the fields of a `leasecron schedule --file` line. Only `type` is
 * required; with neither `at` nor `in` the task is due now.
 */
export interface TaskSpec {
  /**
   * The task id (default: a random one chosen by the server). A retried POST
   * with the same id and body answers as the first did, which is why the
   * client retries a schedule with an id after a network error or timeout.
   */
  id?: string;
  /** The task type (required). */
  type: string;
  /** The payload: a string is the payload text; any other value is sent as its compact JSON. */
  payload?: unknown;
  /** RFC 3339 due time. */
  at?: string;
  /** Go duration from now (`90s`, `10m`). Neither `at` nor `in`: now. */
  in?: string;
  /** `@every` interval (for example `1h`) that makes the task a series. */
  every?: string;
  /** Cron expression that makes the task a series. */
  cron?: string;
  /** IANA time zone of `cron` (for example `Europe/Paris`). */
  tz?: string;
  /** Attempts before the task is dead. */
  max_attempts?: number;
  /** The named queue. */
  queue?: string;
  /** Priority level: 1 (critical) to 4 (low), or its name. */
  priority?: 1 | 2 | 3 | 4 | PriorityName;
  /** The fairness key. */
  fair_key?: string;
  /** Unique key: no other live task may hold it at the same time. */
  unique_key?: string;
  /** Go duration the unique key stays held after the task ends. */
  unique_for?: string;
  /** Comma-separated states that hold the unique key. */
  unique_states?: string;
  /** Ids of the tasks this task waits for. */
  after?: string[];
  /** Start after any of `after` ended, rather than after all of them succeeded. */
  after_any?: boolean;
}

/** A scheduled (pending) task as the server answers it (`Task`). */
export interface Task {
  /** The blob holding a payload too large for the row (then payload is absent). */
  payload_blob?: string;
  /** The task id. */
  id: string;
  /** The task type. */
  type: string;
  /** RFC 3339 time the task (or the series' next occurrence) is due. */
  due: string;
  /** The series' recurrence (`@every 1h` or a cron expression), for a series. */
  recurrence?: string;
  /** IANA time zone of the recurrence. */
  tz?: string;
  /** The payload text. */
  payload?: string;
  /** Attempts before the task is dead. */
  max_attempts?: number;
  /** The named queue. */
  queue?: string;
  /** The priority level (1 critical … 4 low). */
  priority?: number;
  /** The fairness key. */
  fair_key?: string;
  /** The unique key. */
  unique_key?: string;
  /** Ids of the tasks this task waits for. */
  after?: string[];
  /** Whether the task starts after any of `after` ended (not all succeeded). */
  after_any?: boolean;
  /** The batch the task belongs to. */
  batch?: string;
  /** True when the task is its batch's completion callback. */
  callback?: boolean;
  /** True while the task still waits for the tasks of `after`. */
  waiting?: boolean;
  /** RFC 3339 time a series was disabled, when it is. */
  disabled?: string;
}

/** The last progress report of a run's handler. */
export interface RunProgress {
  /** From 0 to 100. */
  percent: number;
  /** What the task says it is doing. */
  message?: string;
  /** RFC 3339 time of the report. */
  at: string;
}

/** A run record: how a task's execution went (`Run`). */
export interface Run {
  /** The lease generation of the worker that ran it. */
  generation?: number;
  /** The task id. */
  id: string;
  /** The run's state. */
  state: RunState;
  /** Attempts made so far. */
  attempts: number;
  /** Duplicate deliveries suppressed. */
  duplicates: number;
  /** The task type. */
  type?: string;
  /** The worker that ran (or runs) the latest attempt. */
  worker?: string;
  /** RFC 3339 time the task was due. */
  due?: string;
  /** RFC 3339 time the latest attempt started. */
  started?: string;
  /** RFC 3339 time the latest attempt finished. */
  finished?: string;
  /** The latest attempt's error. */
  last_error?: string;
  /** The end of the latest attempt's output. */
  output_tail?: string;
  /** The series this run is an occurrence of. */
  series?: string;
  /** RFC 3339 time a snoozed run is due again. */
  snoozed_until?: string;
  /** The handler's last progress report. */
  progress?: RunProgress;
  /** The batch the task belongs to. */
  batch?: string;
  /** Ids of the tasks this run waited for. */
  after?: string[];
  /** RFC 3339 time the record was last written. */
  updated?: string;
}

/**
 * The answer of `GET /tasks/{id}`: the pending task and its run record, each
 * when it exists.
 */
export interface TaskStatus {
  /** The task id. */
  id: string;
  /** The task's state: the run's state, `scheduled` while pending, or `unknown`. */
  state: RunState | "unknown" | (string & {});
  /** The pending task, when there is one. */
  task?: Task;
  /** The run record, when there is one. */
  run?: Run;
}

/** The answer of `POST /tasks`, `PUT /tasks/{id}` and `POST /tasks/{id}/reschedule`. */
export interface TaskAnswer {
  /** The task as written. */
  task: Task;
}

/** A task run once every member of a batch has ended. */
export interface OnComplete {
  /** The callback task's type. */
  type: string;
  /** Its payload (a string is the text; any other value its compact JSON). */
  payload?: unknown;
}

/** The body of `POST /tasks:many`. */
export interface ScheduleManyRequest {
  /** The tasks to schedule (at most `api.max_tasks`, default 1000). */
  tasks: TaskSpec[];
  /**
   * Schedule the valid tasks even when some are invalid (each invalid one is
   * reported in `results`). Without it, one invalid task refuses the whole
   * request with a 422 `invalid-tasks` problem and nothing is scheduled.
   */
  partial?: boolean;
  /** Make the tasks one batch with this id. */
  batch?: string;
  /** A task to run once every task of the batch has ended. */
  on_complete?: OnComplete;
}

/** What became of one task of a `POST /tasks:many`. */
export type ScheduleStatus = "scheduled" | "invalid" | "duplicate" | "held" | "not_written" | "moved";

/** The result for one entry of a `POST /tasks:many`. */
export interface ScheduleResult {
  /** The entry's index in `tasks`. */
  index: number;
  /** The task id. */
  id?: string;
  /** What became of it. */
  status: ScheduleStatus | (string & {});
  /** RFC 3339 due time, when scheduled. */
  due?: string;
  /** Why it was not scheduled. */
  error?: string;
  /** The live task holding its unique key (status `held`). */
  holder?: string;
}

/** The answer of `POST /tasks:many`. */
export interface ScheduleManyResult {
  /** How many tasks were scheduled. */
  scheduled: number;
  /** The batch id, when the tasks form a batch. */
  batch?: string;
  /** One result per entry of `tasks`. */
  results: ScheduleResult[];
}

/** The answer of `POST /tasks/{id}/cancel`. */
export interface CancelResult {
  /** The task id. */
  id: string;
  /** Whether a pending task was removed. */
  removed: boolean;
  /** Whether a queued or running run was marked cancelled. */
  marked: boolean;
}

/** The body of `POST /tasks/{id}/reschedule`: give `at` or `in`. */
export interface RescheduleRequest {
  /** RFC 3339 new due time. */
  at?: string;
  /** Go duration from now (`90s`, `10m`). */
  in?: string;
}

/** Members of a batch in all, and how many ended each way. */
export interface BatchCounts {
  /** The number of members. */
  total: number;
  /** Members that succeeded. */
  succeeded: number;
  /** Members that are dead. */
  dead: number;
  /** Members that were cancelled. */
  cancelled: number;
}

/** The answer of `GET /batches/{id}`. */
export interface BatchStatus {
  /** The batch id. */
  id: string;
  /** Members in all and how many ended each way. */
  counts: BatchCounts;
  /** The number of members that have not ended. */
  pending: number;
  /** Whether every member was written (a batch never sealed never completes). */
  sealed: boolean;
  /** Whether every member has ended. */
  complete: boolean;
  /** The completion callback's task id. */
  callback?: string;
  /** RFC 3339 time the batch was written. */
  created: string;
  /** RFC 3339 time its last member ended. */
  finished?: string;
}

/** What a bulk operation does. */
export type BulkKind = "requeue-dead" | "cancel-pending" | "disable-series";

/** The body of `POST /bulk`: an operation, its filter and the count you confirmed. */
export interface BulkRequest {
  /**
   * The operation's id: `bulk-` and up to 95 letters, digits, `-`, `_` or
   * `.`. A request with one is safe to send again (a resend finds the
   * operation the first send started); the client draws one when you do
   * not give it.
   */
  id?: string;
  /** What the operation does. */
  kind: BulkKind;
  /** Items of this task type. */
  type?: string;
  /** `requeue-dead`: dead letters whose reason contains this. */
  reason?: string;
  /** `cancel-pending`: tasks whose id starts with this. */
  id_prefix?: string;
  /** `cancel-pending`, `disable-series`: tasks of this named queue. */
  queue?: string;
  /** `requeue-dead`: tasks due at or after this (RFC 3339, or a Go duration before now such as `24h`). */
  since?: string;
  /** `requeue-dead`: tasks due before this (as `since`). */
  until?: string;
  /** How many items match, as you confirmed (0 when left out); the server answers 409 when the count differs. */
  expect?: number;
}

/** What a bulk operation acts on; every field set must match. */
export interface BulkFilter {
  /** Items of this task type. */
  type?: string;
  /** Dead letters whose reason contains this. */
  reason?: string;
  /** Tasks whose id starts with this. */
  id_prefix?: string;
  /** Tasks of this named queue. */
  queue?: string;
  /** RFC 3339: dead letters of tasks due at or after this. */
  since?: string;
  /** RFC 3339: dead letters of tasks due before this. */
  until?: string;
}

/** A bulk operation and its progress (`GET /bulk/{id}`). */
export interface Bulk {
  /** The operation id, also the id of the task that runs it. */
  id: string;
  /** What it does, and to what. */
  op: { kind: BulkKind; filter: BulkFilter };
  /** Who started it. */
  by?: string;
  /** How many items matched when it was confirmed. */
  expect: number;
  /** Items acted on. */
  done: number;
  /** Items that could not be acted on (`last_error` says why, for the latest). */
  failed: number;
  /** `running`, `succeeded` or `failed`. */
  state: "running" | "succeeded" | "failed" | (string & {});
  /** The latest error. */
  last_error?: string;
  /** Workers that have run it (more than one after a takeover); 0 while it has not begun. */
  attempts: number;
  /** RFC 3339 time it was started. */
  created: string;
  /** RFC 3339 time of its last progress. */
  updated: string;
  /** RFC 3339 time it finished. */
  finished?: string;
}

/** The answer of `GET /bulk`. */
export interface BulkList {
  /** The operations kept, newest first. */
  operations: Bulk[];
}

/** The answer of `GET /health`. */
export interface Health {
  /** `ok`, or `degraded` with no leader or a due lag over a minute. */
  status: "ok" | "degraded" | (string & {});
  /** The leader instance (absent without one). */
  leader?: string;
  /** The number of worker instances. */
  instances: number;
  /** Messages waiting in the queues. */
  queue_depth: number;
  /** Messages set aside as dead letters. */
  dead_letters: number;
  /** Tasks due and not yet sent. */
  due_count: number;
  /** How late the oldest due task is, in seconds. */
  due_lag_seconds: number;
  /** Task types currently paused. */
  paused_types: string[];
}

/** The query of `GET /runs`. */
export interface RunsQuery {
  /** Only runs in this state. */
  state?: RunState;
  /** Only runs of this task type. */
  type?: string;
  /** Only the occurrences of this series. */
  series?: string;
  /** Only the members of this batch. */
  batch?: string;
  /** Page size, 1–1000 (default 50). */
  limit?: number;
  /** The `continue` token of the previous page. */
  continue?: string;
}

/** The answer of `GET /runs`: one page of runs. */
export interface RunsPage {
  /** The runs of this page. */
  runs: Run[];
  /** The token for the next page; absent on the last one. */
  continue?: string;
}

/** One entry of the `errors` of a 422 `invalid-tasks` problem. */
export interface TaskError {
  /** The entry's index in `tasks`. */
  index: number;
  /** The field that is wrong. */
  field?: string;
  /** What is wrong with it. */
  detail: string;
}

/**
 * An RFC 9457 problem details object (`application/problem+json`): what the
 * API answers on error. `type` is `urn:leasecron:problem:` followed by
 * `invalid-field`, `invalid-body`, `unauthorized`, `forbidden`, `not-found`,
 * `conflict`, `unique-key-held`, `too-large`, `unsupported-media-type`,
 * `invalid-tasks` or `unavailable`.
 */
export interface Problem {
  /** The request path. */
  instance?: string;
  /** A URI naming the kind of problem. */
  type: string;
  /** A short summary of the kind of problem. */
  title: string;
  /** The HTTP status code. */
  status: number;
  /** What went wrong this time. */
  detail: string;
  /** The field or parameter that is wrong (`invalid-field`). */
  field?: string;
  /** What the field accepts (`invalid-field`). */
  accepted?: string;
  /** The live task holding the unique key (`unique-key-held`). */
  holder?: string;
  /** The task a write of unknown outcome may have scheduled (`outcome-unknown`). */
  id?: string;
  /** The invalid tasks (`invalid-tasks`). */
  errors?: TaskError[];
  /** Any other extension member. */
  [extension: string]: unknown;
}
