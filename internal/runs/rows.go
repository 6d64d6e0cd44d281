package runs

import (
	"maps"
	"strings"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// listProps are the properties of a run's list rows: what a listing
// shows, without the output tail and with the start of the last error.
func listProps(r Run) table.Props {
	p := table.Props{
		"Id": r.ID, "State": string(r.State), "Type": r.Type, "Attempts": int32(r.Attempts),
		"Worker": r.Worker, "LastError": trunc.Head(r.LastError, MaxListError), "Generation": r.Generation,
		"Started": r.Started, "Finished": r.Finished, "Due": r.Due, "SnoozedUntil": r.SnoozedUntil,
	}
	if r.Series != "" {
		p["Series"] = r.Series
	}
	if r.Batch != "" {
		p["Batch"] = r.Batch
	}
	maps.Copy(p, progressProps(r.Progress))
	return p
}

// progressProps are the properties of a progress report (none without
// one).
func progressProps(pr leasecrontype.RunProgress) table.Props {
	if !pr.Reported() {
		return nil
	}
	return table.Props{"Progress": int32(pr.Percent), "ProgressMessage": pr.Message, "ProgressAt": pr.At.UTC()}
}

// runProps are the properties of a run's run row: everything.
func runProps(r Run) table.Props {
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
	if len(r.After) > 0 {
		p["After"] = strings.Join(r.After, ",")
	}
	if len(r.Requeued) > 0 {
		p["Requeued"] = strings.Join(r.Requeued, ",")
	}
	if len(r.Withdrawn) > 0 {
		// The latest in the property an earlier release reads, every one
		// in the list beside it.
		p["Withdrawn"] = r.Withdrawn[0]
		if len(r.Withdrawn) > 1 {
			p["WithdrawnDues"] = r.Withdrawn.String()
		}
	}
	if len(r.Behind) > 0 {
		p["Behind"] = r.Behind.String()
	}
	if len(r.CancelledDue) > 0 {
		p["CancelledDue"] = r.CancelledDue.String()
	}
	if len(r.SucceededDue) > 0 {
		p["SucceededDue"] = r.SucceededDue.String()
	}
	if len(r.DeadDue) > 0 {
		p["DeadDue"] = r.DeadDue.String()
	}
	if len(r.ConfirmedBehind) > 0 {
		p["ConfirmedBehind"] = r.ConfirmedBehind.String()
	}
	if r.WaitRetry {
		p["WaitRetry"] = true
	}
	if !r.WaitNoted.IsZero() {
		p["WaitNoted"] = r.WaitNoted.UTC()
	}
	return p
}

// claimProps are the properties a claim sets; merged into rows whose other
// properties (the last error of an earlier attempt, its finish time) stay.
func claimProps(r Run) table.Props {
	p := table.Props{"Id": r.ID, "State": string(r.State), "Attempts": int32(r.Attempts), "Worker": r.Worker, "Started": r.Started, "Due": r.Due}
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
	if r.Batch != "" {
		p["Batch"] = r.Batch
	}
	if len(r.After) > 0 {
		p["After"] = strings.Join(r.After, ",")
	}
	return p
}

// splitList reads a comma-separated list property.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// decodeRun reads a run row or a list row.
func decodeRun(rw table.Entity) Run {
	p := rw.Props
	id := p.Str("Id")
	if id == "" {
		// A row of the previous layout: its RowKey is the id.
		id = strings.TrimPrefix(rw.RowKey, prefixRun)
	}
	return Run{Run: leasecrontype.Run{
		ID: id, State: State(p.Str("State")), Type: p.Str("Type"), Series: p.Str("Series"),
		Attempts: int(p.Int("Attempts")), Worker: p.Str("Worker"),
		Started: p.Time("Started"), Finished: p.Time("Finished"),
		LastError: p.Str("LastError"), OutputTail: p.Str("OutputTail"),
		Duplicates: int(p.Int("Duplicates")), Generation: p.Int("Generation"),
		Due: p.Time("Due"), ClaimUntil: p.Time("ClaimUntil"), SnoozedUntil: p.Time("SnoozedUntil"),
		Progress: leasecrontype.RunProgress{Percent: int(p.Int("Progress")), Message: p.Str("ProgressMessage"), At: p.Time("ProgressAt")},
		Batch:    p.Str("Batch"), After: splitList(p.Str("After")),
		Updated: rw.Timestamp,
	}, Token: p.Str("Token"), Seq: p.Int("Seq"), Requeued: splitList(p.Str("Requeued")), Withdrawn: withdrawnOf(p),
		Behind: parseDues(p.Str("Behind")), CancelledDue: parseDues(p.Str("CancelledDue")),
		SucceededDue: parseDues(p.Str("SucceededDue")), DeadDue: parseDues(p.Str("DeadDue")),
		ConfirmedBehind: parseDues(p.Str("ConfirmedBehind")), WaitNoted: p.Time("WaitNoted"), WaitRetry: p.Bool("WaitRetry"), ETag: rw.ETag, pk: rw.PartitionKey, at: p.Str(propAt)}
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
func transition(cur *Run, next Run) []table.Op {
	pk := next.pk
	ops := []table.Op{{Kind: table.Insert, PartitionKey: pk, RowKey: runKey(next.ID), Props: runProps(next)}}
	if cur != nil {
		ops[0].Kind, ops[0].IfMatch = table.Replace, cur.ETag
	}
	var oldL, oldX string
	var oldP table.Props
	if cur != nil {
		oldL, oldX, oldP = listKey(cur.ID, cur.Due), stateRowKey(*cur), listProps(*cur)
	}
	newP := listProps(next)
	move := func(oldK, newK string) {
		switch {
		case oldK == newK && newK != "":
			if !maps.Equal(oldP, newP) {
				ops = append(ops, table.Op{Kind: table.Replace, PartitionKey: pk, RowKey: newK, Props: newP})
			}
			return
		case oldK != "":
			ops = append(ops, table.Op{Kind: table.Delete, PartitionKey: pk, RowKey: oldK})
		}
		if newK != "" {
			ops = append(ops, table.Op{Kind: table.Insert, PartitionKey: pk, RowKey: newK, Props: newP})
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
func claimOps(token string, next Run) []table.Op {
	pk := next.pk
	cp := claimProps(next)
	run := maps.Clone(cp)
	run["ClaimUntil"] = next.ClaimUntil
	return withSummary([]table.Op{
		{Kind: table.Delete, PartitionKey: pk, RowKey: token},
		{Kind: table.Insert, PartitionKey: pk, RowKey: stateRowKey(next), Props: listProps(next)},
		{Kind: table.Merge, PartitionKey: pk, RowKey: listKey(next.ID, next.Due), Props: cp},
		{Kind: table.Merge, PartitionKey: pk, RowKey: runKey(next.ID), Props: run},
	}, next)
}

// finishOps is the one-write end of an attempt this Store claimed (c):
// it takes c's running state row (failing if a cancel or another worker's
// claim replaced it), adds the new state's row and merges the properties
// named in set into the run row and the time list row.
func finishOps(c, next Run, set []string) []table.Op {
	pk := next.pk
	all, list := runProps(next), listProps(next)
	run, lp := table.Props{}, table.Props{}
	for _, name := range set {
		run[name] = all[name]
		if v, ok := list[name]; ok {
			lp[name] = v
		}
	}
	ops := []table.Op{
		{Kind: table.Delete, PartitionKey: pk, RowKey: stateRowKey(c)},
		{Kind: table.Merge, PartitionKey: pk, RowKey: listKey(next.ID, next.Due), Props: lp},
		{Kind: table.Merge, PartitionKey: pk, RowKey: runKey(next.ID), Props: run},
	}
	if k := stateRowKey(next); k != "" {
		ops = append(ops, table.Op{Kind: table.Insert, PartitionKey: pk, RowKey: k, Props: list})
	}
	return withSummary(ops, next)
}

// withdrawnOf reads a record's withdrawn due times: the list and the one
// due time in Withdrawn, which an earlier release may have changed
// without knowing the list.
func withdrawnOf(p table.Props) dues {
	return parseDues(p.Str("WithdrawnDues")).with(p.Time("Withdrawn"))
}
