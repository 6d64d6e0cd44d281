package memstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

func newTable(t *testing.T, sc *storage.Clients, name string) *aztables.Client {
	t.Helper()
	c := sc.Table.NewClient(name)
	_, err := c.CreateTable(ctxT(t), nil)
	must(t, "create table", err)
	return c
}

func entityJSON(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEntityTypes: what a read returns of each type, with the annotations
// and system properties of minimal metadata.
func TestEntityTypes(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	c := newTable(t, sc, "Types")
	ctx := ctxT(t)
	_, err := c.CreateTable(ctx, nil)
	wantCode(t, "create twice", err, "TableAlreadyExists", 409)
	resp, err := c.AddEntity(ctx, entityJSON(t, map[string]any{
		"PartitionKey": "p", "RowKey": "r", "S": "text", "B": true, "I": 42, "F": 2.5, "W": 3, "W@odata.type": "Edm.Double",
		"L": "1125899906842624", "L@odata.type": "Edm.Int64",
		"T": "2026-11-25T10:30:00.123456789Z", "T@odata.type": "Edm.DateTime",
		"G": "4A4B7C3E-0000-4000-8000-0000000000AB", "G@odata.type": "Edm.Guid",
		"Bin": "AAEC", "Bin@odata.type": "Edm.Binary",
		"Nan": "NaN", "Nan@odata.type": "Edm.Double",
		"Null": nil,
	}), nil)
	must(t, "add", err)
	if resp.ETag == "" || !strings.HasPrefix(string(resp.ETag), `W/"datetime'2026-11-26T12%3A00%3A00.`) {
		t.Fatalf("add: ETag %q", resp.ETag)
	}
	var raw *http.Response
	_, err = c.GetEntity(policy.WithCaptureResponse(ctx, &raw), "p", "r", nil)
	must(t, "get", err)
	rawBody, err := runtime.Payload(raw)
	must(t, "read", err)
	var m map[string]any
	if err := json.Unmarshal(rawBody, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"odata.etag": string(resp.ETag), "PartitionKey": "p", "RowKey": "r", "Timestamp": "2026-11-26T12:00:00.0000000Z",
		"S": "text", "B": true, "I": 42.0, "F": 2.5, "W": 3.0,
		"L": "1125899906842624", "L@odata.type": "Edm.Int64",
		"T": "2026-11-25T10:30:00.1234567Z", "T@odata.type": "Edm.DateTime",
		"G": "4A4B7C3E-0000-4000-8000-0000000000AB", "G@odata.type": "Edm.Guid",
		"Bin": "AAEC", "Bin@odata.type": "Edm.Binary",
		"Nan": "NaN", "Nan@odata.type": "Edm.Double",
	}
	delete(m, "odata.metadata")
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("read\n%v\nwant\n%v", m, want)
	}
	if !strings.Contains(string(rawBody), `"W":3.0`) {
		t.Fatalf("a whole Double is written without its point: %s", rawBody)
	}

	// Values that are not of their annotated type are refused.
	for _, bad := range []map[string]any{
		{"X": "yesterday", "X@odata.type": "Edm.DateTime"},
		{"X": "12", "X@odata.type": "Edm.Boolean"},
		{"X": "1.5", "X@odata.type": "Edm.Int64"},
		{"X": "not-a-guid", "X@odata.type": "Edm.Guid"},
		{"X": "x", "X@odata.type": "Edm.Thing"},
		{"X": map[string]any{"a": 1}},
		{"X": strings.Repeat("x", 32<<10+1)},
	} {
		bad["PartitionKey"], bad["RowKey"] = "p", "bad"
		_, err := c.AddEntity(ctx, entityJSON(t, bad), nil)
		if _, s := code(err); s != 400 {
			t.Fatalf("%v: %v, want 400", bad["X"], err)
		}
	}
	for _, key := range []string{"a/b", "a#b", "a?b", "a\\b", "a\tb", strings.Repeat("k", 1025)} {
		_, err := c.AddEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": key}), nil)
		wantCode(t, fmt.Sprintf("RowKey %.10q", key), err, "OutOfRangeInput", 400)
	}
}

// TestUpdatesAndConditions: update, merge, the upserts and delete with
// If-Match, and the errors leasecron translates.
func TestUpdatesAndConditions(t *testing.T) {
	_, clk, sc := account(t, memstore.Options{})
	c := newTable(t, sc, "Cond")
	ctx := ctxT(t)
	add, err := c.AddEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "A": "1", "B": "2"}), nil)
	must(t, "add", err)
	_, err = c.AddEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil)
	wantCode(t, "add twice", err, "EntityAlreadyExists", 409)
	// The clock stands still, yet every write gets an ETag of its own.
	upd, err := c.UpdateEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "C": "3"}), &aztables.UpdateEntityOptions{IfMatch: &add.ETag, UpdateMode: aztables.UpdateModeMerge})
	must(t, "merge", err)
	if upd.ETag == add.ETag {
		t.Fatalf("a merge at the same instant kept the ETag %s", upd.ETag)
	}
	_, err = c.UpdateEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), &aztables.UpdateEntityOptions{IfMatch: &add.ETag, UpdateMode: aztables.UpdateModeReplace})
	wantCode(t, "replace on a stale ETag", err, "UpdateConditionNotSatisfied", 412)
	if !errors.Is(storage.Translate(err), storage.ErrPreconditionFailed) {
		t.Fatalf("translated to %v", storage.Translate(err))
	}
	_, err = c.UpdateEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "absent"}), &aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETagAny), UpdateMode: aztables.UpdateModeMerge})
	wantCode(t, "update a missing entity", err, "ResourceNotFound", 404)
	_, err = c.DeleteEntity(ctx, "p", "r", &aztables.DeleteEntityOptions{IfMatch: &add.ETag})
	wantCode(t, "delete on a stale ETag", err, "UpdateConditionNotSatisfied", 412)
	clk.Advance(1)
	_, err = c.UpsertEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "D": "4"}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
	must(t, "upsert-merge", err)
	got, err := c.GetEntity(ctx, "p", "r", nil)
	must(t, "get", err)
	var m map[string]any
	_ = json.Unmarshal(got.Value, &m)
	if m["A"] != "1" || m["B"] != "2" || m["C"] != "3" || m["D"] != "4" {
		t.Fatalf("after the merges: %v", m)
	}
	_, err = c.UpsertEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "E": "5"}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	must(t, "upsert-replace", err)
	got, err = c.GetEntity(ctx, "p", "r", nil)
	must(t, "get", err)
	m = nil
	_ = json.Unmarshal(got.Value, &m)
	if m["A"] != nil || m["E"] != "5" {
		t.Fatalf("after the replace: %v", m)
	}
	_, err = c.DeleteEntity(ctx, "p", "r", &aztables.DeleteEntityOptions{IfMatch: &got.ETag})
	must(t, "delete", err)
	_, err = c.GetEntity(ctx, "p", "r", nil)
	wantCode(t, "get a deleted entity", err, "ResourceNotFound", 404)
	_, err = sc.Table.NewClient("Nope").GetEntity(ctx, "p", "r", nil)
	wantCode(t, "get in a missing table", err, "TableNotFound", 404)
	if !errors.Is(storage.Translate(err), storage.ErrTableNotFound) {
		t.Fatalf("translated to %v", storage.Translate(err))
	}
}

// TestQueryPagingAndContinuation: pages of at most 1,000 (or $top) in key
// order across partitions, continued by the service's tokens, with
// $filter and $select.
func TestQueryPagingAndContinuation(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	c := newTable(t, sc, "Paging")
	ctx := ctxT(t)
	const perPart = 1200
	for _, pk := range []string{"b", "a"} {
		for start := 0; start < perPart; start += 100 {
			var actions []aztables.TransactionAction
			for i := start; i < start+100; i++ {
				actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
					Entity: entityJSON(t, map[string]any{"PartitionKey": pk, "RowKey": fmt.Sprintf("r%05d", i), "N": i, "Odd": i%2 == 1})})
			}
			_, err := c.SubmitTransaction(ctx, actions, nil)
			must(t, "insert a batch", err)
		}
	}
	pages := func(o *aztables.ListEntitiesOptions) (sizes []int, keys []string) {
		t.Helper()
		pager := c.NewListEntitiesPager(o)
		for pager.More() {
			p, err := pager.NextPage(ctx)
			must(t, "query", err)
			sizes = append(sizes, len(p.Entities))
			for _, e := range p.Entities {
				var m map[string]any
				_ = json.Unmarshal(e, &m)
				keys = append(keys, fmt.Sprint(m["PartitionKey"], "/", m["RowKey"]))
			}
		}
		return sizes, keys
	}
	sizes, keys := pages(nil)
	if fmt.Sprint(sizes) != "[1000 1000 400]" || keys[0] != "a/r00000" || keys[1199] != "a/r01199" || keys[1200] != "b/r00000" {
		t.Fatalf("all: pages %v, keys %v … %v", sizes, keys[:2], keys[len(keys)-2:])
	}
	sizes, keys = pages(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq 'b' and RowKey ge 'r00010' and Odd eq true and N lt 30"), Top: to.Ptr(int32(4))})
	if fmt.Sprint(sizes) != "[4 4 2]" || strings.Join(keys, ",") != "b/r00011,b/r00013,b/r00015,b/r00017,b/r00019,b/r00021,b/r00023,b/r00025,b/r00027,b/r00029" {
		t.Fatalf("filtered: pages %v, keys %v", sizes, keys)
	}
	// A page that ends exactly at the last match says nothing follows.
	sizes, _ = pages(&aztables.ListEntitiesOptions{Filter: to.Ptr("N eq 7"), Top: to.Ptr(int32(2))})
	if fmt.Sprint(sizes) != "[2]" {
		t.Fatalf("last page: %v", sizes)
	}
	p, err := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("RowKey eq 'r00003'"), Select: to.Ptr("RowKey,N,Missing")}).NextPage(ctx)
	must(t, "select", err)
	if len(p.Entities) != 2 || string(p.Entities[0]) != `{"N":3,"RowKey":"r00003","odata.etag":`+mustJSON(t, p.Entities[0], "odata.etag")+`}` {
		t.Fatalf("select: %s", p.Entities)
	}
	for _, bad := range []string{"N eq", "RowKey eq 'x", "(N eq 1", "N eq 1)", "N xx 1", "and"} {
		_, err := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr(bad)}).NextPage(ctx)
		wantCode(t, "filter "+bad, err, "InvalidInput", 400)
	}
	_, err = c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: to.Ptr(int32(1001))}).NextPage(ctx)
	wantCode(t, "$top 1001", err, "InvalidInput", 400)
	_, err = sc.Table.NewClient("Nope").NewListEntitiesPager(nil).NextPage(ctx)
	wantCode(t, "query a missing table", err, "TableNotFound", 404)

	// Query tables.
	newTable(t, sc, "Other")
	var names []string
	tp := sc.Table.NewListTablesPager(&aztables.ListTablesOptions{Top: to.Ptr(int32(1))})
	for tp.More() {
		page, err := tp.NextPage(ctx)
		must(t, "list tables", err)
		for _, tb := range page.Tables {
			names = append(names, *tb.Name)
		}
	}
	if strings.Join(names, ",") != "Other,Paging" {
		t.Fatalf("tables %v", names)
	}
}

func mustJSON(t *testing.T, raw []byte, key string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m[key])
	return string(b)
}

// TestQuotesInKeysAndFilters: OData string quoting in the URL's keys and
// in $filter literals.
func TestQuotesInKeysAndFilters(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	tb, err := table.NewAzure(sc.Table, "Quotes")
	must(t, "table", err)
	must(t, "create", tb.Create(ctxT(t)))
	_, err = tb.Submit(ctxT(t), []table.Op{{Kind: table.Insert, PartitionKey: "it's", RowKey: "o'clock", Props: table.Props{"S": "x' or '1'='1"}}})
	must(t, "insert", err)
	e, err := tb.Get(ctxT(t), "it's", "o'clock")
	must(t, "get", err)
	page, err := tb.Query(ctxT(t), table.Query{Partition: "it's", Where: []table.Cond{{Prop: "S", Op: table.Eq, Value: "x' or '1'='1"}}})
	if err != nil || len(page.Entities) != 1 {
		t.Fatalf("query on a quoted value: %v, %v", page.Entities, err)
	}
	_, err = tb.Submit(ctxT(t), []table.Op{{Kind: table.Delete, PartitionKey: "it's", RowKey: "o'clock", IfMatch: e.ETag}})
	must(t, "delete", err)
}

// TestBatch: all or nothing, the failure as Azure reports it (202, the
// failing operation's response, its index in the message), and the
// per-operation ETags of a committed batch.
func TestBatch(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	c := newTable(t, sc, "Batch")
	ctx := ctxT(t)
	add := func(rk string) aztables.TransactionAction {
		return aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": rk})}
	}
	fence, err := c.AddEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "fence", "G": 1}), nil)
	must(t, "add", err)
	_, err = c.AddEntity(ctx, entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "old"}), nil)
	must(t, "add", err)

	var resp *http.Response
	_, err = c.SubmitTransaction(policy.WithCaptureResponse(ctx, &resp), []aztables.TransactionAction{
		add("new"),
		{ActionType: aztables.TransactionTypeDelete, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "old"})},
		{ActionType: aztables.TransactionTypeUpdateMerge, IfMatch: to.Ptr(azcore.ETag(`W/"datetime'2000-01-01T00%3A00%3A00.0000000Z'"`)),
			Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "fence", "G": 2})},
	}, nil)
	if !errors.Is(storage.Translate(err), storage.ErrPreconditionFailed) {
		t.Fatalf("a batch with a stale fence: %v, want ErrPreconditionFailed", err)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusAccepted {
		t.Fatalf("error %v", err)
	}
	body, _ := runtime.Payload(re.RawResponse)
	if !strings.Contains(string(body), "HTTP/1.1 412 Precondition Failed") || !strings.Contains(string(body), `"code":"UpdateConditionNotSatisfied"`) ||
		!strings.Contains(string(body), `"value":"2:The update condition`) || !strings.HasPrefix(string(body), "--batchresponse_") {
		t.Fatalf("failure body:\n%s", body)
	}
	if _, err := c.GetEntity(ctx, "p", "new", nil); err == nil {
		t.Fatal("the failed batch's insert was applied")
	}
	if _, err := c.GetEntity(ctx, "p", "old", nil); err != nil {
		t.Fatal("the failed batch's delete was applied")
	}

	for _, tc := range []struct {
		name     string
		actions  []aztables.TransactionAction
		code     string
		index    int
		sentinel error
	}{
		{"insert of an existing row", []aztables.TransactionAction{add("x1"), add("old")}, "EntityAlreadyExists", 1, storage.ErrAlreadyExists},
		{"two partitions", []aztables.TransactionAction{add("x1"), {ActionType: aztables.TransactionTypeAdd, Entity: entityJSON(t, map[string]any{"PartitionKey": "q", "RowKey": "x"})}}, "CommandsInBatchActOnDifferentPartitions", 1, storage.ErrBadRequest},
		{"a row twice", []aztables.TransactionAction{add("x1"), add("x1")}, "InvalidDuplicateRow", 1, storage.ErrBadRequest},
		{"delete of a missing row", []aztables.TransactionAction{add("x1"), {ActionType: aztables.TransactionTypeDelete, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "nope"})}}, "ResourceNotFound", 1, storage.ErrNotFound},
		{"101 operations", func() []aztables.TransactionAction {
			var a []aztables.TransactionAction
			for i := range 101 {
				a = append(a, add(fmt.Sprintf("y%03d", i)))
			}
			return a
		}(), "InvalidInput", 100, storage.ErrBadRequest},
	} {
		_, err := c.SubmitTransaction(ctx, tc.actions, nil)
		if !errors.As(err, &re) || re.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := runtime.Payload(re.RawResponse)
		if !strings.Contains(string(body), `"code":"`+tc.code+`"`) || !strings.Contains(string(body), fmt.Sprintf(`"value":"%d:`, tc.index)) {
			t.Fatalf("%s: body\n%s", tc.name, body)
		}
		if !errors.Is(storage.Translate(err), tc.sentinel) {
			t.Fatalf("%s: translated to %v, want %v", tc.name, storage.Translate(err), tc.sentinel)
		}
		if _, err := c.GetEntity(ctx, "p", "x1", nil); err == nil {
			t.Fatalf("%s: applied in part", tc.name)
		}
	}
	_, err = sc.Table.NewClient("Nope").SubmitTransaction(ctx, []aztables.TransactionAction{add("a"), add("b")}, nil)
	if !errors.Is(storage.Translate(err), storage.ErrTableNotFound) {
		t.Fatalf("a batch on a missing table: %v", err)
	}

	// Committed: one response per operation, in order, with the ETags.
	resp = nil
	_, err = c.SubmitTransaction(policy.WithCaptureResponse(ctx, &resp), []aztables.TransactionAction{
		add("new"),
		{ActionType: aztables.TransactionTypeDelete, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "old"})},
		{ActionType: aztables.TransactionTypeUpdateMerge, IfMatch: &fence.ETag, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "fence", "G": 2})},
		{ActionType: aztables.TransactionTypeInsertReplace, Entity: entityJSON(t, map[string]any{"PartitionKey": "p", "RowKey": "up"})},
	}, nil)
	must(t, "batch", err)
	got, err := c.GetEntity(ctx, "p", "fence", nil)
	must(t, "get", err)
	body, _ = runtime.Payload(resp)
	parts := strings.Count(string(body), "HTTP/1.1 204 No Content")
	if resp.StatusCode != http.StatusAccepted || parts != 4 || !strings.Contains(string(body), "ETag: "+string(got.ETag)) {
		t.Fatalf("committed: %d, %d parts:\n%s", resp.StatusCode, parts, body)
	}
}
