package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/trafficcop"
)

// Rows written from another language (README, "the table contract"): a
// task row inserted straight into the schedule table, with no id index,
// its shard from the count its writer read or was told (an old one is
// allowed: a row in any shard is moved), and deleted straight from the
// table to cancel it.

// rowDeleteMargin is how much earlier than the end of the mover's early
// window a row's delete must answer for the README's promise to hold
// without a race: "deleting a row is how another client cancels its
// task; with run records that works until the row is moved". Nearer
// its due time the delete may race a pass that read the row, which the
// checker does not judge (the at-least-once check excuses it all the
// same).
const rowDeleteMargin = 5 * time.Second

// rows plans, from its own stream, a few tasks written as table rows
// and what is done to them: a delete of the row, well before its early
// window or racing its move; a cancel or a reschedule by id, which find
// the row by a scan.
func (p *planner) rows() {
	c := &p.sc.Config
	saved := p.r
	p.r = rand.New(rand.NewPCG(uint64(c.Seed), 0x70a5)) //nolint:gosec // a simulation's plan, not a secret
	defer func() { p.r = saved }()
	for range p.r.IntN(6) {
		at := p.dur(10*time.Second, c.Active-40*time.Second)
		s := &TaskSpec{ID: p.newID("r"), Type: p.pick(taskTypes), Due: p.due(), Row: true}
		s.Behaviour = p.behaviour(s.Type)
		if p.chance(20) {
			s.MaxAttempts = 1 + p.r.IntN(3)
		}
		if p.chance(20) {
			// A unique task, written with its guard in one transaction;
			// its keys are the ones tasks scheduled through leasecron use.
			s.Unique = p.unique()
		} else if p.chance(12) {
			s.Due = p.dur(0, 30*time.Second)
			s.Recurrence = p.pick([]string{"@every 20s", "@every 1m", "*/2 * * * *"})
			if s.Behaviour.Fail == -1 {
				s.Behaviour.Fail = 1
			}
			s.Behaviour.Sleep = min(s.Behaviour.Sleep, 10*time.Second)
		}
		p.spec[s.ID] = s
		cl := p.r.IntN(2)
		p.add(Op{At: at, Kind: OpRow, Client: cl, Task: s.ID, Spec: s})
		x := p.r.IntN(100)
		switch {
		case x < 25 && s.Recurrence == "":
			// Deleted by its writer (the client that knows its key): well
			// before the early window when the task is due late enough,
			// otherwise racing its move.
			del := at + s.Due - p.dur(-3*time.Second, 3*time.Second)
			if p.chance(50) {
				s.Due = p.dur(2*time.Minute, 4*time.Minute)
				del = at + p.dur(5*time.Second, s.Due-100*time.Second)
			}
			p.add(Op{At: max(at+time.Second, del), Kind: OpRowDelete, Client: cl, Task: s.ID})
		case x < 40:
			p.add(Op{At: at + p.dur(time.Second, max(2*time.Second, s.Due+5*time.Second)), Kind: OpCancel, Client: p.r.IntN(2), Task: s.ID})
		case x < 50 && s.Recurrence == "":
			p.add(Op{At: at + p.dur(time.Second, 20*time.Second), Kind: OpReschedule, Client: p.r.IntN(2), Task: s.ID, Dur: p.due()})
		}
		if x >= 25 && s.Unique == nil && s.Recurrence == "" {
			p.rowCrossing(at, s)
		}
	}
	if p.chance(30) {
		s := &TaskSpec{ID: p.newID("r"), Type: TypePlain, Due: p.due(), Row: true, Bad: p.pick(slices.Sorted(maps.Keys(badRows)))}
		p.add(Op{At: p.dur(10*time.Second, c.Active-40*time.Second), Kind: OpRow, Client: p.r.IntN(2), Task: s.ID, Spec: s})
	}
}

// rowCrossing plans, for some one-off tasks written as rows at at (and not
// deleted by their writer: a delete tells nothing that waits for the
// task), what leasecron's clients do to an id they did not schedule: a
// child waiting for it, a replace of it, a requeue of it once it died
// (since the thirtieth session: these pairs had never met).
func (p *planner) rowCrossing(at time.Duration, s *TaskSpec) {
	switch y := p.r.IntN(100); {
	case y < 15:
		child := &TaskSpec{ID: p.newID("t"), Type: TypePlain, Due: p.due(), After: []string{s.ID}, AfterAny: p.chance(30)}
		child.Behaviour = p.behaviour(child.Type)
		p.spec[child.ID] = child
		p.add(Op{At: at + p.dur(time.Second, 30*time.Second), Kind: OpSchedule, Client: p.r.IntN(2), Task: child.ID, Spec: child})
	case y < 25:
		repl := &TaskSpec{ID: s.ID, Type: p.pick(taskTypes), Due: p.due(), Replace: true}
		repl.Behaviour = p.behaviour(repl.Type)
		p.add(Op{At: at + p.dur(time.Second, 20*time.Second), Kind: OpSchedule, Client: p.r.IntN(2), Task: s.ID, Spec: repl})
	case y < 40 && s.Behaviour.Fail == -1:
		p.add(Op{At: at + max(s.Due, 0) + p.dur(30*time.Second, 150*time.Second), Kind: OpRequeue, Client: p.r.IntN(2), Task: s.ID})
	}
}

// badRows are the malformed rows the scenarios write, by what is wrong:
// properties that README's table contract says what is accepted for.
var badRows = map[string]map[string]any{
	"type":       {"Type": "Two Words"},
	"recurrence": {"Recurrence": "@every banana"},
	"tz":         {"Recurrence": "*/2 * * * *", "TZ": "Moon/Base"},
	"attempts":   {"MaxAttempts": -3},
	"priority":   {"Priority": 9},
	// An id outside the contract's letters, digits and . _ : - (the '@'
	// would make it a series occurrence's run id).
	"id": {"Id": "o'brien@2026"},
}

// rowTable returns a client of the schedule table through c's transport
// (its faults are c's).
func (w *World) rowTable(c *proc) (*aztables.Client, error) {
	svc, err := aztables.NewServiceClientFromConnectionString(w.store.ConnectionString(),
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: c.tr}})
	if err != nil {
		return nil, err
	}
	return svc.NewClient(names(c.shards, c.queues).WithDefaults().ScheduleTable), nil
}

// rowShards is the shard count a writer of rows uses: the count the map
// holds now, read as the README says, or (half the time, or when the read
// fails) the count the client was configured with, which may be an old
// one.
func (w *World) rowShards(ctx context.Context, c *proc, tc *aztables.Client, id string) int {
	if fnv32(id)%2 == 0 {
		return c.shards
	}
	m, err := readShardMap(ctx, tc)
	if err != nil {
		return c.shards
	}
	return m.Count
}

// unixEpochTicks is 1970-01-01T00:00:00Z in .NET ticks (100 ns since
// 0001-01-01), the unit of a row key's due time.
const unixEpochTicks = 621355968000000000

// rowKey is the shard and RowKey of task id due then, for a writer that
// uses shards.
func rowKey(id string, due time.Time, shards int) (string, string, time.Time) {
	ticks := due.UnixNano()/100 + unixEpochTicks
	due = time.Unix(0, (ticks-unixEpochTicks)*100).UTC()
	return shardOf(id, shards), fmt.Sprintf("%019d_%s", ticks, id), due
}

// insertRow writes task s as a row of the schedule table, as a client in
// another language would.
func (w *World) insertRow(ctx context.Context, c *proc, s TaskSpec, op *Op) {
	tc, err := w.rowTable(c)
	if err != nil {
		w.t.Fatalf("row table: %v", err)
	}
	if s.Bad != "" {
		w.insertBadRow(ctx, c, tc, s, op)
		return
	}
	t := w.chk.newTI(s, op, c)
	if s.Unique != nil {
		w.insertUniqueRow(ctx, c, tc, t, s, op)
		return
	}
	shard, rk, due := rowKey(t.id, c.clock.Now().Add(s.Due), w.rowShards(ctx, c, tc, t.id))
	e := taskRow(shard, rk, t, s)
	w.chk.rowAt(t, shard, rk)
	issued := w.now()
	err = addRow(ctx, tc, e)
	w.answer(op, shard+"/"+rk, err)
	w.chk.scheduled(t, issued, leasecron.Item{ID: t.id, Due: due}, err)
}

// taskRow is the entity of task t (spec s) as the table contract has it.
func taskRow(shard, rk string, t *ti, s TaskSpec) map[string]any {
	e := map[string]any{"PartitionKey": shard, "RowKey": rk, "Message": t.payload(), "Type": s.Type}
	if s.Recurrence != "" {
		e["Recurrence"] = s.Recurrence
		if s.TZ != "" {
			e["TZ"] = s.TZ
		}
	}
	if s.MaxAttempts > 0 {
		e["MaxAttempts"] = s.MaxAttempts
	}
	if routed() {
		q, prio, key := route(t.id)
		if q != "" {
			e["Queue"] = q
		}
		if prio > 0 {
			e["Priority"] = prio
		}
		if _, _, tenant := payloadRoute(t.id); key != "" && tenant == "" {
			e["FairKey"] = key
		}
	}
	return e
}

// addRow inserts entity e. Its id is new to the table: a conflict is the
// SDK's retry of an insert whose first answer was lost, which did write
// it.
func addRow(ctx context.Context, tc *aztables.Client, e map[string]any) error {
	_, err := tc.AddEntity(ctx, mustJSON(e), nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
		return nil
	}
	return err
}

// insertBadRow writes a row with property s.Bad malformed (badRows), and
// a payload of no scheduling the checker knows: the mover must set it
// aside with its reason, and a start of it is one of no known scheduling.
func (w *World) insertBadRow(ctx context.Context, c *proc, tc *aztables.Client, s TaskSpec, op *Op) {
	shard, rk, _ := rowKey(s.ID, c.clock.Now().Add(s.Due), w.rowShards(ctx, c, tc, s.ID))
	e := map[string]any{"PartitionKey": shard, "RowKey": rk, "Message": `{"inc":0}`, "Type": s.Type}
	maps.Copy(e, badRows[s.Bad])
	issued := w.now()
	err := addRow(ctx, tc, e)
	w.answer(op, shard+"/"+rk, err)
	w.chk.badRow(badRowEv{row: shard + "/" + rk, typ: e["Type"].(string), issued: issued, due: issued.Add(s.Due), ok: err == nil})
}

// deleteRow deletes the row insertRow wrote for op.Task, as its writer
// would to cancel it.
func (w *World) deleteRow(ctx context.Context, c *proc, op *Op) {
	id := w.chk.RealID(op.Task)
	issued := w.now()
	aim := w.chk.cancelIssued(id, issued)
	shard, rk := w.chk.rowOf(aim)
	if rk == "" {
		w.chk.rowDeleted(aim, issued, false, nil)
		return // never written
	}
	tc, err := w.rowTable(c)
	if err != nil {
		w.t.Fatalf("row table: %v", err)
	}
	_, err = tc.DeleteEntity(ctx, shard, rk, nil)
	found := err == nil
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		// Moved, or deleted by this call (the SDK's retry of a delete
		// whose first answer was lost): it may have taken effect, and
		// promises nothing.
		err = fmt.Errorf("row %s/%s not found: %w", shard, rk, leasecron.ErrNotFound)
	}
	w.answer(op, fmt.Sprintf("deleted=%v", found), err)
	w.chk.rowDeleted(aim, issued, found, err)
}

// earlyWindow is how long before its due time the fleet's movers may send
// a task (README: mover.early, by default one failover: the lease's
// duration and poll).
func (c *checker) earlyWindow() time.Duration { return earlyWindowOf(c.w.plan.Fast) }

// earlyWindowOf is the movers' early window of a fleet with fast timings
// or without.
func earlyWindowOf(fast bool) time.Duration {
	if fast {
		return fastLease + fastLeasePoll
	}
	return trafficcop.DefaultLeaseDuration + trafficcop.DefaultPollEvery
}

// rowAt records where t's row is written, for its writer's delete.
func (c *checker) rowAt(t *ti, shard, rk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.rowShard, t.rowKey = shard, rk
}

// rowOf is where t's row was written ("" when t is nil or was never
// written).
func (c *checker) rowOf(t *ti) (string, string) {
	if t == nil {
		return "", ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.rowShard, t.rowKey
}

// rowDeleted records the answer to a delete of t's row by its writer,
// issued then: found, it removed the row. An error, a not-found included
// (the SDK's retry of a delete whose answer was lost finds the row
// gone), may hide a delete that happened. A delete issued while the
// row's insert was under way may be undone by it: the SDK retries an
// insert whose answer was lost, and a retry after the delete writes the
// row again (seed 146411: the insert answered 3 s after a delete that
// found its row, and the task ran).
func (c *checker) rowDeleted(t *ti, issued time.Time, found bool, err error) {
	if t == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metLocked(t, "cancel", issued, nil)
	t.cancelling = time.Time{}
	if found || err != nil {
		t.rowDeleted = true
		if t.cancelTry.IsZero() {
			t.cancelTry = issued
		}
	}
	racing := t.returned.IsZero() || t.returned.After(issued)
	if found && t.rowGone.IsZero() && !racing {
		t.rowGone = c.w.now()
	}
}

// rowDeleteLeftQueuedLocked reports whether t, a task whose row its
// writer's delete may have removed, may be left queued with no message
// to run it (README, the table contract: a delete racing the move may
// leave the run queued, as a cancel done in part does; seed 105940: a
// row deleted 2.7 s before its due time, its early message dropped as
// stale, its run recorded queued by a pass that had read the row before).
func (c *checker) rowDeleteLeftQueuedLocked(t *ti) bool {
	if !t.rowDeleted || len(t.starts) > 0 {
		return false
	}
	// Only a delete that raced the move: one that answered an error may
	// have landed any time before its answer; one that answered well
	// before the early window took the row before any pass could read it.
	// (Its row's due time is the one it was written with, by its writer's
	// clock: up to the skew off the world's.)
	return t.rowGone.IsZero() || t.schedDue.Sub(t.rowGone) <= c.earlyWindow()+rowDeleteMargin+c.skew
}

// checkRowGoneLocked: a task whose row its writer deleted well before its
// early window never runs (README, the table contract).
func (c *checker) checkRowGoneLocked(t *ti, ev *runEv) {
	if t.rowGone.IsZero() || !ev.start.After(t.rowGone) || c.continuesLocked(t, ev) {
		return
	}
	if lead := ev.due.Sub(t.rowGone); lead > c.earlyWindow()+rowDeleteMargin+c.skew {
		c.violate(InvCancelled, "%s started on %s after its row was deleted at %s, %v before its due time (the early window is %v)",
			ev.runID, ev.proc.id, c.at(t.rowGone), lead.Round(time.Millisecond), c.earlyWindow())
	}
}

// badRow records the insert of a malformed row (shard/RowKey), which
// answered err: one that may have been written must end in the poison
// queue (README: "Malformed rows are never dropped").
func (c *checker) badRow(b badRowEv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.badRows = append(c.badRows, b)
}

type badRowEv struct {
	row, typ    string // its Type, as written
	issued, due time.Time
	ok          bool // written for sure (else it may have been)
}

// badRowsDueLocked reports whether a malformed row may not have come
// within the movers' reach by now: one due later than every task the
// quiet phase waits for is set aside only when a pass reaches it.
func (c *checker) badRowsDueLocked(now time.Time) bool {
	return slices.ContainsFunc(c.badRows, func(b badRowEv) bool { return now.Before(b.due.Add(badRowSlack + c.skew)) })
}

// badRowSlack is how long after a malformed row's due time the quiet
// phase waits for a pass to set it aside (and the clocks' skew more: the
// due time is by its writer's clock, a mover's by another).
const badRowSlack = 30 * time.Second

// finalBadRows: every malformed row written is among the dead letters at
// the end, its reason naming it; one whose insert answered an error may
// never have been written.
func (c *checker) finalBadRows() {
	for _, b := range c.badRows {
		named := slices.ContainsFunc(c.deadReasons, func(r string) bool { return strings.Contains(r, b.row) })
		// A bulk cancel or disable of its type may have reached it first:
		// the row is then a pending task of that type to it (seed 105215:
		// a bulk cancel-pending of plain begun a second before the row was
		// written took it for a series, and removed it).
		_, cancelled := c.bulkReach("cancel-pending", b.typ, b.issued)
		_, disabled := c.bulkReach("disable-series", b.typ, b.issued)
		if b.ok && !named && c.deadListed && !cancelled && !disabled {
			c.violate(InvAtLeastOnce, "malformed row %s was dropped: no dead letter at the end names it (dead letters: %d)", b.row, len(c.deadReasons))
		}
	}
}

// errRowRefused: a unique row was not written, and its writer knows it
// (README, the table contract): its transaction met the key's guard,
// naming another task (the key is held, or was by a task that no longer
// holds it; this writer does not take a stale guard over), or a guard
// sealed by a change of the shard count, or a shard closed to the count
// it placed by; or the map said a change of the count was under way.
var errRowRefused = errors.New("sim: unique row not written")

// insertUniqueRow writes unique task t as the table contract says: its
// row and its key's guard in one transaction, in the shard of
// "{type}~{key}" under the map's count, its id drawn to fall in that
// shard, requiring the shard's open row when the map names one for that
// count or the count is 1 (no map included), and writing that row again
// when it is missing and the map is unchanged; not while a change of the
// count is under way, and placed again (here: refused) when the
// transaction meets a guard sealed by a change or a shard closed to the
// count it read.
func (w *World) insertUniqueRow(ctx context.Context, c *proc, tc *aztables.Client, t *ti, s TaskSpec, op *Op) {
	issued := w.now()
	m, err := readShardMap(ctx, tc)
	if err == nil && m.PrevCount != 0 {
		err = fmt.Errorf("the shard count is changing from %d to %d", m.PrevCount, m.Count)
	}
	if err != nil {
		// Nothing written: the writer cannot place it (yet).
		w.answer(op, "", err)
		w.chk.scheduled(t, issued, leasecron.Item{}, fmt.Errorf("%w: %w", errRowRefused, err))
		return
	}
	n := m.Count
	shard := shardOf(s.Type+"~"+s.Unique.Key, n)
	id := s.ID
	for i := 0; shardOf(id, n) != shard; i++ {
		id = fmt.Sprintf("%s-%d", s.ID, i)
	}
	_, rk, due := rowKey(id, c.clock.Now().Add(s.Due), n)
	now := c.clock.Now().UTC()
	forS := int64(s.Unique.For / time.Second)
	e := taskRow(shard, rk, t, s)
	e["UniqueKey"] = s.Unique.Key
	e["UniqueFor"], e["UniqueFor@odata.type"] = strconv.FormatInt(forS, 10), "Edm.Int64"
	e["UniqueStates"] = s.Unique.States
	gk := "uq~" + s.Type + "~" + s.Unique.Key
	guard := map[string]any{"PartitionKey": shard, "RowKey": gk, "Task": id,
		"UniqueFor": strconv.FormatInt(forS, 10), "UniqueFor@odata.type": "Edm.Int64", "UniqueStates": s.Unique.States,
		"Created": now.Format(time.RFC3339Nano), "CheckAfter": now.Add(s.Unique.For).Format(time.RFC3339Nano), "CheckAfter@odata.type": "Edm.DateTime",
		"Under": n}
	var acts []aztables.TransactionAction
	for _, x := range []map[string]any{e, guard} {
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: mustJSON(x)})
	}
	open := ""
	if m.Open == n || n == 1 {
		// (Last in the batch: a failure names the first action that
		// failed, and a held guard is the likelier one.)
		open = fmt.Sprintf("uq~~open~%d", n)
		anyTag := azcore.ETagAny
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeUpdateMerge, IfMatch: &anyTag,
			Entity: mustJSON(map[string]any{"PartitionKey": shard, "RowKey": open})})
	}
	w.chk.rowAt(t, shard, rk)
	for try := 0; ; try++ {
		_, err = tc.SubmitTransaction(ctx, acts, nil)
		if te := storage.Translate(err); !errors.Is(te, storage.ErrNotFound) || open == "" {
			break
		}
		// The shard's open row is missing: a change of the count closed
		// the shard to takes placed by n, or no take in it has written
		// the row yet (the README's repair).
		rerr := reopenShard(ctx, tc, shard, open, n, m)
		if rerr != nil || try == 2 {
			err = fmt.Errorf("%w: shard %s is closed to %d shards: %w", errRowRefused, shard, n, cmp.Or(rerr, err))
			break
		}
	}
	if errors.Is(storage.Translate(err), storage.ErrAlreadyExists) {
		// Written by this very call (the SDK's retry of a transaction
		// whose answer was lost), sealed by a change of the count, or
		// held: the guard says which, in that order (a guard this call
		// wrote may have been sealed since).
		g, gerr := tc.GetEntity(ctx, shard, gk, nil)
		var held struct {
			Task, Created string
			SealedFor     json.Number
		}
		switch {
		case gerr != nil:
			err = fmt.Errorf("read the guard: %w", gerr)
		case json.Unmarshal(g.Value, &held) != nil:
			err = fmt.Errorf("read the guard: %s", g.Value)
		case held.Task == id && held.Created == guard["Created"]:
			err = nil
		case held.SealedFor != "":
			err = fmt.Errorf("%w: the guard is sealed for %s shards", errRowRefused, held.SealedFor)
		default:
			err = fmt.Errorf("%w: held by %s", errRowRefused, held.Task)
		}
	}
	w.answer(op, shard+"/"+rk, err)
	w.chk.scheduled(t, issued, leasecron.Item{ID: id, Due: due}, err)
}

// reopenShard writes shard's open row of n (row) again, as the README tells a
// writer whose transaction found it missing: only when the map, read
// again, is still m and names n open (or there is no map yet); and it
// takes the row back out when the map, read after the write, no longer
// is m or cannot be read (a change began meanwhile, whose walk may have
// closed the shard before this write landed). It reads the map after a
// 409 too: the row there may be this very insert, tried again by the SDK
// after its answer was lost. nil: try the transaction again.
func reopenShard(ctx context.Context, tc *aztables.Client, shard, row string, n int, m shardMap) error {
	if now, err := readShardMap(ctx, tc); err != nil || now != m || !(m.Open == n || m.None) {
		return cmp.Or(err, fmt.Errorf("the shard map moved on from %d shards, or names none open", n))
	}
	add, err := tc.AddEntity(ctx, mustJSON(map[string]any{"PartitionKey": shard, "RowKey": row,
		"Count": strconv.Itoa(n), "Count@odata.type": "Edm.Int64"}), nil)
	etag := add.ETag // "": read the row before deleting it
	switch {
	case errors.Is(storage.Translate(err), storage.ErrAlreadyExists):
		etag = "" // a take's, or this insert's own
	case err != nil:
		return fmt.Errorf("write the open row %s: %w", row, err)
	}
	if now, err := readShardMap(ctx, tc); err == nil && now == m {
		return nil
	}
	takenBack := fmt.Errorf("the shard map changed as the open row %s was written; taken back", row)
	for range 5 {
		if etag == "" {
			// Changed since it was written (a take merged into it), or
			// not this call's: delete it again, unless a change of the
			// count wrote it as its own.
			e, gerr := tc.GetEntity(ctx, shard, row, nil)
			var set struct{ Set string }
			switch {
			case errors.Is(storage.Translate(gerr), storage.ErrNotFound):
				return takenBack
			case gerr != nil:
				continue
			case json.Unmarshal(e.Value, &set) == nil && set.Set != "":
				return fmt.Errorf("the shard map changed as the open row %s was written; a change wrote it since", row)
			}
			etag = e.ETag
		}
		_, err := tc.DeleteEntity(ctx, shard, row, &aztables.DeleteEntityOptions{IfMatch: &etag})
		te := storage.Translate(err)
		switch {
		case err == nil, errors.Is(te, storage.ErrNotFound):
			return takenBack
		case errors.Is(te, storage.ErrPreconditionFailed):
			etag = ""
		}
	}
	return fmt.Errorf("the shard map changed as the open row %s was written, and taking it back failed", row)
}

// mustJSON is x encoded (a map of strings and numbers encodes).
func mustJSON(x map[string]any) []byte {
	b, err := json.Marshal(x)
	if err != nil {
		panic(err)
	}
	return b
}

// shardMap is what a writer in another language reads from the map row
// ("~shards", "~map"), as the README tells it to: the count to place by,
// the count before a change still under way (0: none), and the count
// whose open rows stand (0: none).
type shardMap struct {
	Count, PrevCount, Open int
	None                   bool // no map row: one shard
}

// readShardMap reads the map (a count of 1 when no map was written yet).
func readShardMap(ctx context.Context, tc *aztables.Client) (shardMap, error) {
	got, err := tc.GetEntity(ctx, "~shards", "~map", nil)
	if errors.Is(storage.Translate(err), storage.ErrNotFound) {
		return shardMap{Count: 1, None: true}, nil
	}
	if err != nil {
		return shardMap{}, err
	}
	var m struct{ Count, PrevCount, Open json.Number }
	if err := json.Unmarshal(got.Value, &m); err != nil {
		return shardMap{}, err
	}
	var out shardMap
	for _, f := range []struct {
		n   json.Number
		dst *int
	}{{m.Count, &out.Count}, {m.PrevCount, &out.PrevCount}, {m.Open, &out.Open}} {
		if f.n == "" {
			continue
		}
		n, err := strconv.Atoi(f.n.String())
		if err != nil || n < 0 {
			return shardMap{}, fmt.Errorf("map %+v", m)
		}
		*f.dst = n
	}
	if out.Count == 0 {
		// A map row with no count (an unsharded fleet's, which carries
		// the run layout only) is no map.
		out.Count, out.None = 1, true
	}
	return out, nil
}

// shardOf is the README's shard of s under n shards.
func shardOf(s string, n int) string {
	return fmt.Sprintf("%02d", fnv32(s)%uint32(max(n, 1)))
}
