package runs

import (
	"maps"
	"strings"

	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// listProps are the properties of a run's list rows: what a listing
// shows, without the output tail and with the start of the last error.
func listProps(r Run) props {
	p := props{
		"Id": r.ID, "State": string(r.State), "Type": r.Type, "Attempts": int32(r.Attempts),
		"Worker": r.Worker, "LastError": trunc.Head(r.LastError, MaxListError), "Generation": r.Generation,
		"Started": r.Started, "Finished": r.Finished, "Due": r.Due, "SnoozedUntil": r.SnoozedUntil,
	}
	if r.Series != "" {
		p["Series"] = r.Series
	}
	return p
}

// runProps are the properties of a run's run row: everything.
func runProps(r Run) props {
	p := listProps(r)
	p["LastError"] = trunc.Head(r.LastError, MaxLastError)
	p["OutputTail"] = trunc.Tail(r.OutputTail, MaxOutputTail)
	p["Duplicates"] = int32(r.Duplicates)
	p["ClaimUntil"] = r.ClaimUntil
	if r.Token != "" {
		p["Token"] = r.Token
	}
	if r.Seq > 0 {
		p["Seq"] = r.Seq
	}
	return p
}

// claimProps are the properties a claim sets; merged into rows whose other
// properties (the last error of an earlier attempt, its finish time) stay.
func claimProps(r Run) props {
	p := props{"Id": r.ID, "State": string(r.State), "Attempts": int32(r.Attempts), "Worker": r.Worker, "Started": r.Started, "Due": r.Due}
	// What the delivery did not say is left as the record has it.
	if r.Type != "" {
		p["Type"] = r.Type
	}
	if r.Generation != 0 {
		p["Generation"] = r.Generation
	}
	if r.Series != "" {
		p["Series"] = r.Series
	}
	if r.Seq > 0 {
		p["Seq"] = r.Seq
	}
	return p
}

// decodeRun reads a run row or a list row.
func decodeRun(rw row) Run {
	p := rw.p
	id := p.str("Id")
	if id == "" {
		// A row of the previous layout: its RowKey is the id.
		id = strings.TrimPrefix(rw.rk, prefixRun)
	}
	return Run{Run: leasecrontype.Run{
		ID: id, State: State(p.str("State")), Type: p.str("Type"), Series: p.str("Series"),
		Attempts: int(p.int("Attempts")), Worker: p.str("Worker"),
		Started: p.time("Started"), Finished: p.time("Finished"),
		LastError: p.str("LastError"), OutputTail: p.str("OutputTail"),
		Duplicates: int(p.int("Duplicates")), Generation: p.int("Generation"),
		Due: p.time("Due"), ClaimUntil: p.time("ClaimUntil"), SnoozedUntil: p.time("SnoozedUntil"),
		Updated: rw.updated,
	}, Token: p.str("Token"), Seq: p.int("Seq"), etag: rw.etag}
}

// Public returns r as the public leasecrontype.Run.
func (r Run) Public() leasecrontype.Run { return r.Run }

// stateRowKey returns r's state list row key, or "" when its state has
// none.
func stateRowKey(r Run) string {
	if !hasStateRow(r.State) {
		return ""
	}
	who := r.Worker
	if r.State == Queued {
		who = r.Token
	}
	return stateKey(r.State, r.ID, r.Due, who)
}

// transition returns the one transaction that takes a run from cur (nil:
// no record) to next: its run row (inserted, or replaced conditionally on
// cur's ETag), its time list row and its state list row, each moved when
// its key changes and rewritten only when what it shows changes. Every
// change to a run goes through one such transaction, so its three rows
// never disagree.
func transition(cur *Run, next Run) []op {
	pk := bucketOf(next.ID)
	ops := []op{{kind: opInsert, pk: pk, rk: runKey(next.ID), p: runProps(next)}}
	if cur != nil {
		ops[0].kind, ops[0].ifMatch = opReplace, cur.etag
	}
	var oldL, oldX string
	var oldP props
	if cur != nil {
		oldL, oldX, oldP = listKey(cur.ID, cur.Due), stateRowKey(*cur), listProps(*cur)
	}
	newP := listProps(next)
	move := func(oldK, newK string) {
		switch {
		case oldK == newK && newK != "":
			if !maps.Equal(oldP, newP) {
				ops = append(ops, op{kind: opReplace, pk: pk, rk: newK, p: newP})
			}
			return
		case oldK != "":
			ops = append(ops, op{kind: opDelete, pk: pk, rk: oldK})
		}
		if newK != "" {
			ops = append(ops, op{kind: opInsert, pk: pk, rk: newK, p: newP})
		}
	}
	move(oldL, listKey(next.ID, next.Due))
	move(oldX, stateRowKey(next))
	return ops
}

// claimOps is the one-write claim of a run whose state row token is known
// to exist: take the token (the transaction fails if another claim, a
// cancel or a finish took it first), add the running state row and merge
// the claim into the run row and the time list row.
func claimOps(token string, next Run) []op {
	pk := bucketOf(next.ID)
	cp := claimProps(next)
	run := maps.Clone(cp)
	run["ClaimUntil"] = next.ClaimUntil
	return withSummary([]op{
		{kind: opDelete, pk: pk, rk: token},
		{kind: opInsert, pk: pk, rk: stateRowKey(next), p: listProps(next)},
		{kind: opMerge, pk: pk, rk: listKey(next.ID, next.Due), p: cp},
		{kind: opMerge, pk: pk, rk: runKey(next.ID), p: run},
	}, next)
}

// finishOps is the one-write end of an attempt this Store claimed (c):
// it takes c's running state row (failing if a cancel or another worker's
// claim replaced it), adds the new state's row and merges the properties
// named in set into the run row and the time list row.
func finishOps(c, next Run, set []string) []op {
	pk := bucketOf(next.ID)
	all, list := runProps(next), listProps(next)
	run, lp := props{}, props{}
	for _, name := range set {
		run[name] = all[name]
		if v, ok := list[name]; ok {
			lp[name] = v
		}
	}
	ops := []op{
		{kind: opDelete, pk: pk, rk: stateRowKey(c)},
		{kind: opMerge, pk: pk, rk: listKey(next.ID, next.Due), p: lp},
		{kind: opMerge, pk: pk, rk: runKey(next.ID), p: run},
	}
	if k := stateRowKey(next); k != "" {
		ops = append(ops, op{kind: opInsert, pk: pk, rk: k, p: list})
	}
	return withSummary(ops, next)
}
