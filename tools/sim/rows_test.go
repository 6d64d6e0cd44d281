package sim

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/memstore"
)

// A task whose row its writer deleted must not start when the delete
// answered more than the early window before its due time (nothing can
// have been sent or read for the move by then); nearer its due time the
// delete races the move, and a start is not judged. A delete that found
// no row promises nothing, nor does one issued while the row's insert
// was under way, which can write the row again (seed 146411).
func TestADeletedRowsTaskNeverRuns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lead    time.Duration // from the delete's answer to the due time
		found   bool
		racing  bool // the insert answers after the delete
		violate bool
	}{
		{"deleted long before its due time", 3 * time.Minute, true, false, true},
		{"deleted within the early window", 30 * time.Second, true, false, false},
		{"the row was gone already", 3 * time.Minute, false, false, false},
		{"deleted while its insert was under way", 3 * time.Minute, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, c := newTestChecker()
				r := c.newTI(TaskSpec{ID: "r1", Type: TypePlain, Row: true}, nil, nil)
				inserted := w.now()
				item := leasecron.Item{ID: "r1", Due: w.now().Add(tc.lead + time.Second)}
				if !tc.racing {
					c.scheduled(r, inserted, item, nil)
				}
				time.Sleep(time.Second)
				issued := w.now()
				var err error
				if !tc.found {
					err = leasecron.ErrNotFound
				}
				c.rowDeleted(c.cancelIssued("r1", issued), issued, tc.found, err)
				if tc.racing {
					c.scheduled(r, inserted, item, nil)
				}
				time.Sleep(tc.lead)
				got := violationsOf(c, func() { c.checkStartLocked(r, okNow(w, r, "r1", r.due)) })
				if (len(got) > 0) != tc.violate {
					t.Errorf("violations %q; want a violation: %v", got, tc.violate)
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				if _, cancelled := c.cancelledBy(r, w.now()); !cancelled {
					t.Error("the task is not taken for cancelled, though its row's delete may have removed it")
				}
			})
		})
	}
}

// A malformed row that was written must be among the dead letters at the
// end, its reason naming it (README: malformed rows are never dropped);
// one whose insert answered an error may not have been written, one a
// bulk cancel of its type may have reached was cancelled (seed 105215),
// and with the dead letters unread nothing is judged.
func TestAMalformedRowIsNeverDropped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		reasons []string
		listed  bool
		violate bool
	}{
		{"set aside", nil, []string{"malformed row 03/0639_r7: property Priority is 9"}, true, false},
		{"dropped", nil, []string{"malformed row 03/0639_r8: property Priority is 9"}, true, true},
		{"its insert failed", errors.New("503"), nil, true, false},
		{"dead letters unread", nil, nil, false, false},
		{"cancelled by a bulk cancel of its type", nil, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, c := newTestChecker()
			if strings.HasPrefix(tc.name, "cancelled") {
				c.bulk(bulkEv{id: "bulk-1", kind: "cancel-pending", typ: TypePlain, started: w.now(), ok: true})
			}
			c.badRow(badRowEv{row: "03/0639_r7", typ: TypePlain, issued: w.now(), due: w.now(), ok: tc.err == nil})
			c.mu.Lock()
			c.deadReasons, c.deadListed = tc.reasons, tc.listed
			c.finalBadRows()
			c.mu.Unlock()
			if len(c.violations) > 0 != tc.violate || tc.violate && !strings.Contains(c.violations[0].Detail, "was dropped") {
				t.Errorf("violations %v; want a violation: %v", c.violations, tc.violate)
			}
		})
	}
}

// A delete of a task's row by its writer racing the move may leave its run
// queued with no message to run it, as README says (seed 105940); a task
// whose row nobody deleted, queued at the end, was lost, and so was one
// whose row's delete answered well before its early window (no pass can
// have read the row for a move by then).
func TestADeletedRowsRunMayStayQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, c := newTestChecker()
		queued := leasecron.Status{Run: &leasecron.Run{State: leasecron.RunQueued}}
		for id, due := range map[string]time.Duration{"r1": 20 * time.Second, "r2": 20 * time.Second, "r3": 3 * time.Minute} {
			r := c.newTI(TaskSpec{ID: id, Type: TypePlain, Row: true}, nil, nil)
			c.scheduled(r, w.now(), leasecron.Item{ID: id, Due: w.now().Add(due)}, nil)
			c.status[id] = queued
		}
		time.Sleep(17 * time.Second)
		for _, id := range []string{"r1", "r3"} {
			issued := w.now()
			c.rowDeleted(c.cancelIssued(id, issued), issued, true, nil)
		}
		got := finalTaskViolations(c)
		if len(got) != 2 || !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, "r2 is queued") }) ||
			!slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, "r3 is queued") }) {
			t.Errorf("violations %q; want r2's (nobody deleted its row) and r3's (its row was deleted well before its early window)", got)
		}
	})
}

// The quiet phase waits for a malformed row due after every task it waits
// for, until a pass can have set it aside (else the final check would
// find it dropped).
func TestTheQuietPhaseWaitsForAMalformedRowsDueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, c := newTestChecker()
		c.badRow(badRowEv{row: "00/0639_r7", typ: TypePlain, issued: w.now(), due: w.now().Add(3 * time.Minute), ok: true})
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.badRowsDueLocked(w.now().Add(3 * time.Minute)) {
			t.Error("at its due time, the malformed row is not waited for")
		}
		if !c.badRowsDueLocked(w.now().Add(3*time.Minute + badRowSlack)) {
			t.Error("within the clocks' skew of its slack, the malformed row is not waited for")
		}
		if c.badRowsDueLocked(w.now().Add(3*time.Minute + badRowSlack + c.skew)) {
			t.Error("a pass after its due time had time to set the row aside, and it is still waited for")
		}
	})
}

// mapTurn is a transport that writes the shard map with Count 4 just
// before the n-th read of the map passes through it: a change of the count
// begun between two of a writer's reads. It counts the writer's inserts,
// and with mergeOnDelete merges into the row a delete is about to remove
// (once): a take that merged into the open row as it was taken back.
type mapTurn struct {
	rt            policy.Transporter
	tc            *aztables.Client // over rt itself
	n             int
	reads         int
	inserts       int
	mergeOnDelete bool
}

func (m *mapTurn) Do(req *http.Request) (*http.Response, error) {
	switch {
	case req.Method == http.MethodGet && strings.Contains(req.URL.Path, "~map"):
		if m.reads++; m.reads == m.n {
			if _, err := m.tc.UpsertEntity(req.Context(), mustJSON(map[string]any{"PartitionKey": "~shards", "RowKey": "~map",
				"Count": "4", "Count@odata.type": "Edm.Int64", "Open": "4", "Open@odata.type": "Edm.Int64"}), nil); err != nil {
				return nil, err
			}
		}
	case req.Method == http.MethodPost:
		m.inserts++
	case req.Method == http.MethodDelete && m.mergeOnDelete:
		m.mergeOnDelete = false
		if _, err := m.tc.UpdateEntity(req.Context(), mustJSON(map[string]any{"PartitionKey": "00", "RowKey": "uq~~open~1"}),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			return nil, err
		}
	}
	return m.rt.Do(req)
}

// A writer whose unique row's transaction found its shard's open row
// missing writes the row again only while the map is as it read it, and
// takes it back out when the map changed as it wrote it (README, unique
// tasks from another language): a row left for a count the fleet has left
// would let a take placed by it commit beside the key's holder. It reads
// the map after an insert answered 409 too (the row may be its own insert,
// tried again after the answer was lost), deletes a row a take merged
// into meanwhile again, and leaves one a change of the count wrote.
func TestAWriterReopensAShardOnlyForTheMapItRead(t *testing.T) {
	for _, tc := range []struct {
		name          string
		turnAt        int            // the map read before which the map changes (0: never)
		there         map[string]any // the open row's properties before the writer's insert (nil: none)
		mergeOnDelete bool
		wantErr       bool
		wantLeft      bool
		wantInserts   int
	}{
		{name: "map unchanged", wantLeft: true, wantInserts: 1},
		{name: "map changed before the writer looked again", turnAt: 1, wantErr: true},
		{name: "map changed as the row was written", turnAt: 2, wantErr: true, wantInserts: 1},
		{name: "a take merged into it as it was taken back", turnAt: 2, mergeOnDelete: true, wantErr: true, wantInserts: 1},
		{name: "there already, map unchanged", there: map[string]any{}, wantLeft: true, wantInserts: 1},
		{name: "there already (its own insert, answer lost), map changed", there: map[string]any{}, turnAt: 2, wantErr: true, wantInserts: 1},
		{name: "written by a change of the count, map changed", there: map[string]any{"Set": "t1"}, turnAt: 2, wantErr: true, wantLeft: true, wantInserts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New(memstore.Options{Now: time.Now})
			raw := tableClient(t, store, store.Transport())
			turn := &mapTurn{rt: store.Transport(), tc: raw, n: tc.turnAt, mergeOnDelete: tc.mergeOnDelete}
			ctx := t.Context()
			if _, err := raw.CreateTable(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if tc.there != nil {
				row := map[string]any{"PartitionKey": "00", "RowKey": "uq~~open~1", "Count": "1", "Count@odata.type": "Edm.Int64"}
				maps.Copy(row, tc.there)
				if _, err := raw.AddEntity(ctx, mustJSON(row), nil); err != nil {
					t.Fatal(err)
				}
			}
			err := reopenShard(ctx, tableClient(t, store, turn), "00", "uq~~open~1", 1, shardMap{Count: 1, None: true})
			if (err != nil) != tc.wantErr {
				t.Fatalf("reopenShard = %v, want an error: %v", err, tc.wantErr)
			}
			_, gerr := raw.GetEntity(ctx, "00", "uq~~open~1", nil)
			if left := gerr == nil; left != tc.wantLeft {
				t.Errorf("open row left: %v (%v), want %v", left, gerr, tc.wantLeft)
			}
			if turn.inserts != tc.wantInserts {
				t.Errorf("%d inserts of the open row, want %d", turn.inserts, tc.wantInserts)
			}
			if turn.mergeOnDelete {
				t.Error("the row was never taken back")
			}
		})
	}
}

// tableClient is a client of the schedule table over rt.
func tableClient(t *testing.T, store *memstore.Server, rt policy.Transporter) *aztables.Client {
	t.Helper()
	svc, err := aztables.NewServiceClientFromConnectionString(store.ConnectionString(),
		&aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rt}})
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewClient("schedule")
}
