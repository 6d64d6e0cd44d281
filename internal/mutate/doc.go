// Package mutate switches deliberate defects on, one at a time, so that a
// test can show the simulator's invariant checker catches each kind of
// broken promise (tools/sim's TestMutations): a checker that never fails
// proves nothing.
//
// Product code asks On(name) where a defect would go. In an ordinary build
// (without the leasecron_mutate build tag) On is a constant false that the
// compiler removes with the code it guards; only a test binary built with
// -tags leasecron_mutate can switch a defect on, with Set. Never build a
// release with the tag.
package mutate

// The defects, by what they break.
const (
	// DropMessage: the consumer acknowledges some messages without running
	// them (at least once).
	DropMessage = "drop-message"
	// RerunSucceeded: a claim no longer refuses a run that succeeded.
	RerunSucceeded = "rerun-succeeded"
	// NoFence: the mover commits without the fence row's condition.
	NoFence = "no-fence"
	// CancelNoop: Cancel reports a pending task removed without removing it.
	CancelNoop = "cancel-noop"
	// UniqueEarly: a unique key is free as soon as an attempt of its task
	// ended (the defect issue 38 found).
	UniqueEarly = "unique-early"
	// AfterFirstParent: a task waiting for several is released by the
	// first parent's end.
	AfterFirstParent = "after-first-parent"
	// CallbackEarly: a batch's callback is released when any member ends.
	CallbackEarly = "callback-early"
	// NoRate: rate limits are not applied.
	NoRate = "no-rate"
	// NoLimit: concurrency limits are not applied.
	NoLimit = "no-limit"
	// IgnorePause: the consumer runs tasks of paused types.
	IgnorePause = "ignore-pause"
	// IgnoreDisable: disabled series are moved like the others.
	IgnoreDisable = "ignore-disable"
	// BulkRewalk: a bulk requeue requeues its own tasks' new dead letters
	// (the defect issue 38 found).
	BulkRewalk = "bulk-rewalk"
	// EarlyStart: the consumer does not hold a message that arrives
	// before its due time.
	EarlyStart = "early-start"
	// NoPointers: a lookup by id does not look under the previous shard
	// count.
	NoPointers = "no-pointers"
	// SkipOccurrence: the mover schedules a series' occurrence after next.
	SkipOccurrence = "skip-occurrence"
	// TwoAtOnce: a claim does not refuse a run another worker holds.
	TwoAtOnce = "two-at-once"
	// WrongOutcome: a dead run is recorded succeeded.
	WrongOutcome = "wrong-outcome"
	// NoRelease: a task waiting for others is never released.
	NoRelease = "no-release"
	// BoardTwoAtOnce: a blackboard worker claims a due key that another
	// worker is running.
	BoardTwoAtOnce = "board-two-at-once"
	// BoardEarly: a blackboard key is due half an interval after its
	// last start.
	BoardEarly = "board-early"
	// BoardRemoveNoop: removing a blackboard key reports success and
	// leaves it on the board.
	BoardRemoveNoop = "board-remove-noop"
	// BoardStall: a blackboard key stops being claimed after its third
	// run.
	BoardStall = "board-stall"
	// DieEarly: a task dies at its first failed attempt, whatever its
	// max attempts.
	DieEarly = "die-early"
	// NeverDie: a failing task is retried past its max attempts.
	NeverDie = "never-die"
	// RequeueNoSend: a requeue of a dead letter by id answers success and
	// removes the dead letter without sending the task.
	RequeueNoSend = "requeue-no-send"
	// RefuseStale: the mover leaves a moved one-off task's id index row,
	// and a schedule refuses an id whose index row names no row, as if it
	// were pending.
	RefuseStale = "refuse-stale"
	// UniqueForever: a unique key stays held after its task ended and its
	// window passed.
	UniqueForever = "unique-forever"
	// KeepOldRow: a reschedule or run-now writes the task's new row and
	// leaves the old one, so its old version runs too.
	KeepOldRow = "keep-old-row"
	// KeepPayload: a one-off task's payload blob is left after its
	// success.
	KeepPayload = "keep-payload"
	// DropPayload: a task's payload blob is deleted when an attempt of
	// it fails, though its retries need it.
	DropPayload = "drop-payload"
	// KeepRolledBack: a rolled-back schedule --file (or ScheduleMany)
	// leaves what it wrote of the lines it wrote (their task rows, id
	// index rows and payload blobs), though it reports them not written,
	// so they run.
	KeepRolledBack = "keep-rolled-back"
	// EarlyPastDepth: under queue.max_depth, a mover sends tasks ahead of
	// their due time however many it already has waiting (the early room
	// unbounded), so a burst comes due as many times max_depth of
	// backlog.
	EarlyPastDepth = "early-past-depth"
)

// All lists every defect.
var All = []string{DropMessage, RerunSucceeded, NoFence, CancelNoop, UniqueEarly, AfterFirstParent, CallbackEarly, NoRate, NoLimit,
	IgnorePause, IgnoreDisable, BulkRewalk, EarlyStart, NoPointers, SkipOccurrence, TwoAtOnce, WrongOutcome, NoRelease,
	BoardTwoAtOnce, BoardEarly, BoardRemoveNoop, BoardStall, DieEarly, RequeueNoSend, RefuseStale, KeepOldRow, UniqueForever, NeverDie, KeepPayload, DropPayload, KeepRolledBack, EarlyPastDepth}
