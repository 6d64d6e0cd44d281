package sim

import (
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
			s.Recurrence = p.pick([]string{"@every 20s", "@every 1m"})
			if s.Behaviour.Fail == -1 {
				s.Behaviour.Fail = 1
			}
			s.Behaviour.Sleep = min(s.Behaviour.Sleep, 10*time.Second)
		}
		p.spec[s.ID] = s
		cl := p.r.IntN(2)
		p.add(Op{At: at, Kind: OpRow, Client: cl, Task: s.ID, Spec: s})
		switch x := p.r.IntN(100); {
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
	}
	if p.chance(30) {
		s := &TaskSpec{ID: p.newID("r"), Type: TypePlain, Due: p.due(), Row: true, Bad: p.pick(slices.Sorted(maps.Keys(badRows)))}
		p.add(Op{At: p.dur(10*time.Second, c.Active-40*time.Second), Kind: OpRow, Client: p.r.IntN(2), Task: s.ID, Spec: s})
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
	n, err := mapCount(ctx, tc)
	if err != nil {
		return c.shards
	}
	return n
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
	body, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	_, err = tc.AddEntity(ctx, body, nil)
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
	w.chk.badRow(shard+"/"+rk, e["Type"].(string), issued, err)
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
func (c *checker) earlyWindow() time.Duration {
	if c.w.plan.Fast {
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
// gone), may hide a delete that happened.
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
	if found && t.rowGone.IsZero() {
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
	return t.rowDeleted && len(t.starts) == 0
}

// checkRowGoneLocked: a task whose row its writer deleted well before its
// early window never runs (README, the table contract).
func (c *checker) checkRowGoneLocked(t *ti, ev *runEv) {
	if t.rowGone.IsZero() || !ev.start.After(t.rowGone) || c.continuesLocked(t, ev) {
		return
	}
	if lead := ev.due.Sub(t.rowGone); lead > c.earlyWindow()+rowDeleteMargin {
		c.violate(InvCancelled, "%s started on %s after its row was deleted at %s, %v before its due time (the early window is %v)",
			ev.runID, ev.proc.id, c.at(t.rowGone), lead.Round(time.Millisecond), c.earlyWindow())
	}
}

// badRow records the insert of a malformed row (shard/RowKey), which
// answered err: one that may have been written must end in the poison
// queue (README: "Malformed rows are never dropped").
func (c *checker) badRow(row, typ string, issued time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.badRows = append(c.badRows, badRowEv{row: row, typ: typ, issued: issued, ok: err == nil})
}

type badRowEv struct {
	row, typ string // its Type, as written
	issued   time.Time
	ok       bool // written for sure (else it may have been)
}

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

// errRowRefused: a unique row's transaction met the key's guard, naming
// another task (README, the table contract: the key is held, or was by
// a task that no longer holds it; this writer does not take a stale guard
// over). Nothing was written.
var errRowRefused = errors.New("sim: the key's guard exists (409)")

// insertUniqueRow writes unique task t as the table contract says: its
// row and its key's guard in one transaction, in the shard of
// "{type}~{key}" under the map's count, its id drawn to fall in that shard.
func (w *World) insertUniqueRow(ctx context.Context, c *proc, tc *aztables.Client, t *ti, s TaskSpec, op *Op) {
	issued := w.now()
	n, err := mapCount(ctx, tc)
	if err != nil {
		// Nothing written: the writer cannot place it.
		w.answer(op, "", err)
		w.chk.scheduled(t, issued, leasecron.Item{}, fmt.Errorf("%w: shard count unread: %w", errRowRefused, err))
		return
	}
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
	guard := map[string]any{"PartitionKey": shard, "RowKey": "uq~" + s.Type + "~" + s.Unique.Key, "Task": id,
		"UniqueFor": strconv.FormatInt(forS, 10), "UniqueFor@odata.type": "Edm.Int64", "UniqueStates": s.Unique.States,
		"Created": now.Format(time.RFC3339Nano), "CheckAfter": now.Add(s.Unique.For).Format(time.RFC3339Nano), "CheckAfter@odata.type": "Edm.DateTime"}
	var acts []aztables.TransactionAction
	for _, x := range []map[string]any{e, guard} {
		b, merr := json.Marshal(x)
		if merr != nil {
			panic(merr)
		}
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: b})
	}
	w.chk.rowAt(t, shard, rk)
	_, err = tc.SubmitTransaction(ctx, acts, nil)
	if errors.Is(storage.Translate(err), storage.ErrAlreadyExists) {
		// Held, or written by this very call (the SDK's retry of a
		// transaction whose answer was lost): the guard says which.
		g, gerr := tc.GetEntity(ctx, shard, "uq~"+s.Type+"~"+s.Unique.Key, nil)
		var holder struct{ Task string }
		switch {
		case gerr != nil:
			err = fmt.Errorf("read the guard: %w", gerr)
		case json.Unmarshal(g.Value, &holder) == nil && holder.Task == id:
			err = nil
		default:
			err = fmt.Errorf("%w: held by %s", errRowRefused, holder.Task)
		}
	}
	w.answer(op, shard+"/"+rk, err)
	w.chk.scheduled(t, issued, leasecron.Item{ID: id, Due: due}, err)
}

// mapCount reads the shard count from the map, as the README tells a
// writer in another language to (1 when no map was written yet).
func mapCount(ctx context.Context, tc *aztables.Client) (int, error) {
	got, err := tc.GetEntity(ctx, "~shards", "~map", nil)
	if errors.Is(storage.Translate(err), storage.ErrNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	var m struct{ Count json.Number }
	if err := json.Unmarshal(got.Value, &m); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(m.Count.String())
	if err != nil || n < 1 {
		return 0, fmt.Errorf("map count %q", m.Count)
	}
	return n, nil
}

// shardOf is the README's shard of s under n shards.
func shardOf(s string, n int) string {
	return fmt.Sprintf("%02d", fnv32(s)%uint32(max(n, 1)))
}
