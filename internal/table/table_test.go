package table_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// backend opens a fresh table (created) and a name for one that does not
// exist.
type backend struct {
	open    func(t *testing.T) table.Table
	missing func(t *testing.T) table.Table
	// checksTypes: the backend refuses a value that is not of its
	// annotated type, as Azure does (Azurite and Memory store it).
	checksTypes bool
}

func backends() map[string]backend {
	return map[string]backend{
		"memory": {
			open: func(t *testing.T) table.Table {
				return table.NewMemory("T", nil)
			},
			missing: func(t *testing.T) table.Table { return table.NewMissingMemory("T", nil) },
		},
		"memstore": {
			open: func(t *testing.T) table.Table {
				tb := memstoreTable(t)
				if err := tb.Create(ctxT(t)); err != nil {
					t.Fatal(err)
				}
				return tb
			},
			missing:     memstoreTable,
			checksTypes: true,
		},
		"azurite": {
			open: func(t *testing.T) table.Table {
				tb := azureTable(t)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := tb.Create(ctx); err != nil {
					t.Fatal(err)
				}
				return tb
			},
			missing:     azureTable,
			checksTypes: azuritetest.Memstore(),
		},
	}
}

func azureTable(t *testing.T) table.Table {
	t.Helper()
	srv := azuritetest.Shared(t)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := table.NewAzure(sc.Table, azuritetest.Name(t, "t"))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// memstoreTable is a table of a fresh in-memory account (memstore),
// reached through the SDK as Azure is, over an in-process transport. The
// table does not exist yet.
func memstoreTable(t *testing.T) table.Table {
	t.Helper()
	srv := memstore.New(memstore.Options{})
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Transport: srv.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := table.NewAzure(sc.Table, "T"+azuritetest.Name(t, "t"))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestConformance runs one suite on every implementation: what it checks
// is what leasecron's stores rely on of Azure Table storage.
func TestConformance(t *testing.T) {
	for name, b := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) { c.run(t, b) })
			}
		})
	}
}

var conformance = []struct {
	name string
	run  func(t *testing.T, b backend)
}{
	{"missing table", testMissing},
	{"create twice", testCreateTwice},
	{"property types round trip", testTypes},
	{"annotations survive a rewrite", testRewrite},
	{"insert refuses an existing row", testInsertExists},
	{"merge replace and conditions", testUpdates},
	{"delete", testDelete},
	{"upserts", testUpserts},
	{"transaction is all or nothing", testAtomic},
	{"transaction rules", testTxnRules},
	{"transaction etags", testTxnETags},
	{"range query order and paging", testRange},
	{"partition range with continuation", testPartitionRange},
	{"conditions", testConditions},
	{"select", testSelect},
	{"quotes in keys", testQuotes},
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSubmit(t *testing.T, tb table.Table, ops ...table.Op) []string {
	t.Helper()
	etags, err := tb.Submit(ctxT(t), ops)
	if err != nil {
		t.Fatalf("submit %v: %v", ops, err)
	}
	return etags
}

func ins(pk, rk string, p table.Props) table.Op {
	return table.Op{Kind: table.Insert, PartitionKey: pk, RowKey: rk, Props: p}
}

func testMissing(t *testing.T, b backend) {
	tb := b.missing(t)
	ctx := ctxT(t)
	if _, err := tb.Get(ctx, "p", "r"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Errorf("Get on a missing table: %v, want ErrTableNotFound", err)
	}
	if _, err := tb.Query(ctx, table.Query{Partition: "p"}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Query on a missing table: %v, want nothing or ErrNotFound", err)
	}
	if _, err := tb.Submit(ctx, []table.Op{ins("p", "r", nil)}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("insert into a missing table: %v, want ErrNotFound", err)
	}
	if err := tb.Create(ctx); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, tb, ins("p", "r", nil))
}

func testCreateTwice(t *testing.T, b backend) {
	tb := b.open(t)
	if err := tb.Create(ctxT(t)); err != nil {
		t.Fatalf("second Create: %v", err)
	}
}

func testTypes(t *testing.T, b backend) {
	tb := b.open(t)
	when := time.Date(2026, 11, 25, 10, 30, 0, 123456789, time.UTC)
	mustSubmit(t, tb, ins("p", "r", table.Props{
		"S": "text", "B": true, "I32": int32(-7), "I": 42, "Big": 1 << 40, "I64": int64(1) << 50,
		"T": when, "Zero": time.Time{}, "F": 2.5, "N": json.Number("17"), "Empty": "",
	}))
	e, err := tb.Get(ctxT(t), "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	p := e.Props
	checks := []struct {
		name      string
		got, want any
	}{
		{"S", p.Str("S"), "text"},
		{"B", p.Bool("B"), true},
		{"I32", p.Int("I32"), int64(-7)},
		{"I", p.Int("I"), int64(42)},
		{"Big", p.Int("Big"), int64(1 << 40)},
		{"I64", p.Int("I64"), int64(1) << 50},
		{"T", p.Time("T"), when.Truncate(100 * time.Nanosecond)},
		{"Empty", p.Str("Empty"), ""},
		{"N", p.Int("N"), int64(17)},
		{"I64 type", p["I64"+table.TypeSuffix], "Edm.Int64"},
		{"T type", p["T"+table.TypeSuffix], "Edm.DateTime"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if f, ok := p["F"].(json.Number); !ok || f.String() != "2.5" {
		t.Errorf("F = %#v, want 2.5", p["F"])
	}
	if _, ok := p["Zero"]; ok {
		t.Errorf("a zero time was written: %#v", p["Zero"])
	}
	if _, has := p["Empty"]; !has {
		t.Error("an empty string property was dropped")
	}
	if e.ETag == "" || e.Timestamp.IsZero() || !strings.Contains(e.Raw, `"text"`) {
		t.Errorf("ETag %q, Timestamp %v, Raw %q: want all set", e.ETag, e.Timestamp, e.Raw)
	}
	if _, _, err := p.StrictInt("S"); err == nil {
		t.Error("StrictInt of a string property that is no number: no error")
	}
	if _, _, err := p.StrictString("B"); err == nil {
		t.Error("StrictString of a bool: no error")
	}
	if _, ok, err := p.StrictString("Absent"); ok || err != nil {
		t.Errorf("StrictString of an absent property: ok %v err %v", ok, err)
	}
}

func testRewrite(t *testing.T, b backend) {
	tb := b.open(t)
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mustSubmit(t, tb, ins("p", "r", table.Props{"I64": int64(5), "T": when, "Keep": "x"}))
	e, err := tb.Get(ctxT(t), "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	p := e.Props.Clone()
	p["Keep"] = "y"
	mustSubmit(t, tb, table.Op{Kind: table.Replace, PartitionKey: "p", RowKey: "r", Props: p, IfMatch: e.ETag})
	e2, err := tb.Get(ctxT(t), "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if e2.Props["I64"+table.TypeSuffix] != "Edm.Int64" || e2.Props["T"+table.TypeSuffix] != "Edm.DateTime" {
		t.Errorf("types after a rewrite of the read props: %v", e2.Props)
	}
	if e2.Props.Int("I64") != 5 || !e2.Props.Time("T").Equal(when) || e2.Props.Str("Keep") != "y" {
		t.Errorf("values after a rewrite: %v", e2.Props)
	}
	// A typed value replaces a property of another type, annotation and all.
	p2 := e2.Props.Clone()
	p2["T"] = "now a string"
	p2["I64"] = int32(3)
	if b.checksTypes {
		// A plain string keeps the annotation its property was read with
		// (Encode), so this body says T is the Edm.DateTime "now a
		// string": Azure refuses it, Azurite and Memory store it.
		if _, err := tb.Submit(ctxT(t), []table.Op{{Kind: table.Replace, PartitionKey: "p", RowKey: "r", Props: p2}}); !errors.Is(err, storage.ErrBadRequest) {
			t.Errorf("a string under a DateTime annotation: %v, want ErrBadRequest", err)
		}
		p2.Delete("T")
		p2["T"] = "now a string"
	}
	mustSubmit(t, tb, table.Op{Kind: table.Replace, PartitionKey: "p", RowKey: "r", Props: p2})
	e3, err := tb.Get(ctxT(t), "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if e3.Props.Str("T") != "now a string" || e3.Props.Int("I64") != 3 || e3.Props["I64"+table.TypeSuffix] == "Edm.Int64" {
		t.Errorf("after retyping: %v", e3.Props)
	}
}

func testInsertExists(t *testing.T, b backend) {
	tb := b.open(t)
	mustSubmit(t, tb, ins("p", "r", nil))
	if _, err := tb.Submit(ctxT(t), []table.Op{ins("p", "r", nil)}); !errors.Is(err, storage.ErrAlreadyExists) {
		t.Errorf("second insert: %v, want ErrAlreadyExists", err)
	}
	if _, err := tb.Submit(ctxT(t), []table.Op{ins("p", "other", nil), ins("p", "r", nil)}); !errors.Is(err, storage.ErrAlreadyExists) {
		t.Errorf("insert of an existing row in a transaction: %v, want ErrAlreadyExists", err)
	}
	if _, err := tb.Get(ctxT(t), "p", "other"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the failed transaction's other insert: %v, want ErrNotFound", err)
	}
}

func testUpdates(t *testing.T, b backend) {
	tb := b.open(t)
	tags := mustSubmit(t, tb, ins("p", "r", table.Props{"A": "1", "B": "2"}))
	first := tags[0]
	tags = mustSubmit(t, tb, table.Op{Kind: table.Merge, PartitionKey: "p", RowKey: "r", Props: table.Props{"B": "3", "C": "4"}, IfMatch: first})
	e, _ := tb.Get(ctxT(t), "p", "r")
	if e.Props.Str("A") != "1" || e.Props.Str("B") != "3" || e.Props.Str("C") != "4" {
		t.Errorf("after merge: %v", e.Props)
	}
	if tags[0] != e.ETag {
		t.Errorf("merge returned ETag %q, the row has %q", tags[0], e.ETag)
	}
	for _, kind := range []table.OpKind{table.Merge, table.Replace, table.Delete} {
		if _, err := tb.Submit(ctxT(t), []table.Op{{Kind: kind, PartitionKey: "p", RowKey: "r", Props: table.Props{"A": "x"}, IfMatch: first}}); !errors.Is(err, storage.ErrPreconditionFailed) {
			t.Errorf("%s with a stale ETag: %v, want ErrPreconditionFailed", kind, err)
		}
		if _, err := tb.Submit(ctxT(t), []table.Op{{Kind: kind, PartitionKey: "p", RowKey: "absent", Props: table.Props{"A": "x"}}}); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s of a missing row: %v, want ErrNotFound", kind, err)
		}
	}
	mustSubmit(t, tb, table.Op{Kind: table.Replace, PartitionKey: "p", RowKey: "r", Props: table.Props{"D": "5"}, IfMatch: e.ETag})
	e, _ = tb.Get(ctxT(t), "p", "r")
	if len(e.Props) != 1 || e.Props.Str("D") != "5" {
		t.Errorf("after replace: %v", e.Props)
	}
	mustSubmit(t, tb, table.Op{Kind: table.Merge, PartitionKey: "p", RowKey: "r", Props: table.Props{"E": "6"}, IfMatch: "*"})
}

func testDelete(t *testing.T, b backend) {
	tb := b.open(t)
	tags := mustSubmit(t, tb, ins("p", "r", nil))
	mustSubmit(t, tb, table.Op{Kind: table.Delete, PartitionKey: "p", RowKey: "r", IfMatch: tags[0]})
	if _, err := tb.Get(ctxT(t), "p", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	mustSubmit(t, tb, ins("p", "r", nil))
	mustSubmit(t, tb, table.Op{Kind: table.Delete, PartitionKey: "p", RowKey: "r"})
}

func testUpserts(t *testing.T, b backend) {
	tb := b.open(t)
	mustSubmit(t, tb, table.Op{Kind: table.Upsert, PartitionKey: "p", RowKey: "r", Props: table.Props{"A": "1", "B": "2"}})
	mustSubmit(t, tb, table.Op{Kind: table.UpsertMerge, PartitionKey: "p", RowKey: "r", Props: table.Props{"B": "3"}})
	e, _ := tb.Get(ctxT(t), "p", "r")
	if e.Props.Str("A") != "1" || e.Props.Str("B") != "3" {
		t.Errorf("after upsert-merge: %v", e.Props)
	}
	mustSubmit(t, tb,
		table.Op{Kind: table.Upsert, PartitionKey: "p", RowKey: "r", Props: table.Props{"C": "4"}},
		table.Op{Kind: table.UpsertMerge, PartitionKey: "p", RowKey: "new", Props: table.Props{"D": "5"}})
	e, _ = tb.Get(ctxT(t), "p", "r")
	if len(e.Props) != 1 || e.Props.Str("C") != "4" {
		t.Errorf("after upsert in a transaction: %v", e.Props)
	}
	if e, err := tb.Get(ctxT(t), "p", "new"); err != nil || e.Props.Str("D") != "5" {
		t.Errorf("upsert-merge of a new row: %v %v", e.Props, err)
	}
}

func testAtomic(t *testing.T, b backend) {
	tb := b.open(t)
	tags := mustSubmit(t, tb, ins("p", "fence", table.Props{"G": int64(1)}))
	mustSubmit(t, tb, ins("p", "a", nil))
	// The last operation's condition fails: nothing of the transaction
	// happens.
	_, err := tb.Submit(ctxT(t), []table.Op{
		{Kind: table.Delete, PartitionKey: "p", RowKey: "a"},
		ins("p", "b", nil),
		{Kind: table.Merge, PartitionKey: "p", RowKey: "fence", Props: table.Props{"G": int64(2)}, IfMatch: `W/"datetime'2000-01-01T00%3A00%3A00.0000000Z'"`},
	})
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("transaction with a stale fence: %v, want ErrPreconditionFailed", err)
	}
	if _, err := tb.Get(ctxT(t), "p", "a"); err != nil {
		t.Errorf("row a after the failed transaction: %v, want it kept", err)
	}
	if _, err := tb.Get(ctxT(t), "p", "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("row b after the failed transaction: %v, want ErrNotFound", err)
	}
	mustSubmit(t, tb, table.Op{Kind: table.Delete, PartitionKey: "p", RowKey: "a"}, ins("p", "b", nil),
		table.Op{Kind: table.Merge, PartitionKey: "p", RowKey: "fence", Props: table.Props{"G": int64(2)}, IfMatch: tags[0]})
}

func testTxnRules(t *testing.T, b backend) {
	tb := b.open(t)
	cases := []struct {
		name string
		ops  []table.Op
	}{
		{"two partitions", []table.Op{ins("p", "a", nil), ins("q", "b", nil)}},
		{"one row twice", []table.Op{ins("p", "a", nil), {Kind: table.Merge, PartitionKey: "p", RowKey: "a", Props: table.Props{"X": "1"}}}},
		{"over 100 operations", func() []table.Op {
			ops := make([]table.Op, table.MaxOps+1)
			for i := range ops {
				ops[i] = ins("p", fmt.Sprintf("r%03d", i), nil)
			}
			return ops
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := tb.Submit(ctxT(t), c.ops); !errors.Is(err, storage.ErrBadRequest) {
				t.Errorf("%v, want ErrBadRequest", err)
			}
			page, err := tb.Query(ctxT(t), table.Query{PartitionFrom: "a", PartitionTo: "z"})
			if err != nil || len(page.Entities) != 0 {
				t.Errorf("after a refused transaction the table holds %d rows (%v)", len(page.Entities), err)
			}
		})
	}
	ops := make([]table.Op, table.MaxOps)
	for i := range ops {
		ops[i] = ins("p", fmt.Sprintf("r%03d", i), nil)
	}
	mustSubmit(t, tb, ops...)
}

func testTxnETags(t *testing.T, b backend) {
	tb := b.open(t)
	mustSubmit(t, tb, ins("p", "gone", nil))
	tags := mustSubmit(t, tb, ins("p", "a", table.Props{"X": "1"}), ins("p", "b", nil), table.Op{Kind: table.Delete, PartitionKey: "p", RowKey: "gone"})
	if tags == nil {
		return // an implementation may not tell; callers re-read
	}
	for i, rk := range []string{"a", "b"} {
		e, err := tb.Get(ctxT(t), "p", rk)
		if err != nil || e.ETag != tags[i] {
			t.Errorf("row %s: ETag %q, the transaction said %q (%v)", rk, e.ETag, tags[i], err)
		}
	}
	if tags[2] != "" {
		t.Errorf("a delete's ETag: %q, want empty", tags[2])
	}
}

func testRange(t *testing.T, b backend) {
	tb := b.open(t)
	var ops []table.Op
	for i := 0; i < 25; i++ {
		ops = append(ops, ins("p", fmt.Sprintf("k%02d", i), table.Props{"N": int32(i)}))
	}
	mustSubmit(t, tb, ops...)
	mustSubmit(t, tb, ins("other", "k05", nil))
	q := table.Query{Partition: "p", From: "k03", To: "k20", Top: 5}
	var got []string
	pages := 0
	for {
		page, err := tb.Query(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Entities) > 5 {
			t.Fatalf("page of %d, Top 5", len(page.Entities))
		}
		for _, e := range page.Entities {
			if e.PartitionKey != "p" {
				t.Fatalf("row of partition %q", e.PartitionKey)
			}
			got = append(got, e.RowKey)
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	if strings.Join(got, ",") != "k03,k04,k05,k06,k07,k08,k09,k10,k11,k12,k13,k14,k15,k16,k17,k18,k19" {
		t.Errorf("rows %v", got)
	}
	if pages < 4 {
		t.Errorf("%d pages for 17 rows of 5", pages)
	}
	all, err := table.All(ctxT(t), tb, table.Query{Partition: "p"}, 0)
	if err != nil || len(all) != 25 {
		t.Errorf("All: %d rows, %v", len(all), err)
	}
	if _, err := tb.Query(ctxT(t), table.Query{Partition: "p", Continuation: "garbage"}); !errors.Is(err, storage.ErrBadRequest) {
		t.Errorf("a malformed continuation: %v, want ErrBadRequest", err)
	}
}

func testPartitionRange(t *testing.T, b backend) {
	tb := b.open(t)
	for _, pk := range []string{"p0", "p1", "p2", "q0"} {
		mustSubmit(t, tb, ins(pk, "a", nil), ins(pk, "b", nil), ins(pk, "c", nil))
	}
	q := table.Query{PartitionFrom: "p0", PartitionTo: "p2", From: "b", Top: 2}
	var got []string
	for {
		page, err := tb.Query(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entities {
			got = append(got, e.PartitionKey+"/"+e.RowKey)
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	if strings.Join(got, ",") != "p0/b,p0/c,p1/b,p1/c,p2/b,p2/c" {
		t.Errorf("rows %v", got)
	}
}

func testConditions(t *testing.T, b backend) {
	tb := b.open(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	mustSubmit(t, tb,
		ins("p", "a", table.Props{"S": "apple", "T": t0, "B": true}),
		ins("p", "b", table.Props{"S": "banana", "T": t0.Add(time.Hour), "B": false}),
		ins("p", "c", table.Props{"S": "cherry"}),
		ins("p", "d", table.Props{"Other": "x"}))
	cases := []struct {
		name  string
		where []table.Cond
		want  string
	}{
		{"eq", []table.Cond{{Prop: "S", Op: table.Eq, Value: "banana"}}, "b"},
		{"ne skips a missing property", []table.Cond{{Prop: "S", Op: table.Ne, Value: "banana"}}, "a,c"},
		{"gt empty is non-empty", []table.Cond{{Prop: "S", Op: table.Gt, Value: ""}}, "a,b,c"},
		{"lt", []table.Cond{{Prop: "S", Op: table.Lt, Value: "banana"}}, "a"},
		{"le", []table.Cond{{Prop: "S", Op: table.Le, Value: "banana"}}, "a,b"},
		{"ge", []table.Cond{{Prop: "S", Op: table.Ge, Value: "banana"}}, "b,c"},
		{"time lt", []table.Cond{{Prop: "T", Op: table.Lt, Value: t0.Add(time.Minute)}}, "a"},
		{"time ge", []table.Cond{{Prop: "T", Op: table.Ge, Value: t0}}, "a,b"},
		{"bool", []table.Cond{{Prop: "B", Op: table.Eq, Value: true}}, "a"},
		{"two conditions", []table.Cond{{Prop: "S", Op: table.Gt, Value: "a"}, {Prop: "T", Op: table.Gt, Value: t0}}, "b"},
		{"quote in a value", []table.Cond{{Prop: "S", Op: table.Eq, Value: "x' or '1'='1"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			page, err := tb.Query(ctxT(t), table.Query{Partition: "p", Where: c.where})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range page.Entities {
				got = append(got, e.RowKey)
			}
			if strings.Join(got, ",") != c.want {
				t.Errorf("%s: rows %v, want %s", c.where, got, c.want)
			}
		})
	}
}

func testSelect(t *testing.T, b backend) {
	tb := b.open(t)
	mustSubmit(t, tb, ins("p", "a", table.Props{"A": "1", "B": int64(2), "C": "3"}))
	page, err := tb.Query(ctxT(t), table.Query{Partition: "p", Select: []string{"B", "Missing"}})
	if err != nil || len(page.Entities) != 1 {
		t.Fatalf("%v %v", page, err)
	}
	p := page.Entities[0].Props
	if p.Int("B") != 2 || p.Str("A") != "" || p.Str("C") != "" || page.Entities[0].RowKey != "a" {
		t.Errorf("selected props %v of %s", p, page.Entities[0].RowKey)
	}
}

func testQuotes(t *testing.T, b backend) {
	tb := b.open(t)
	pk, rk := "it's", "o'clock"
	tags := mustSubmit(t, tb, ins(pk, rk, table.Props{"A": "1"}))
	e, err := tb.Get(ctxT(t), pk, rk)
	if err != nil || e.Props.Str("A") != "1" {
		t.Fatalf("get: %v %v", e.Props, err)
	}
	page, err := tb.Query(ctxT(t), table.Query{Partition: pk, From: "o'"})
	if err != nil || len(page.Entities) != 1 {
		t.Errorf("query: %d rows, %v", len(page.Entities), err)
	}
	mustSubmit(t, tb, table.Op{Kind: table.Delete, PartitionKey: pk, RowKey: rk, IfMatch: tags[0]}, ins(pk, "x", nil))
	if _, err := tb.Get(ctxT(t), pk, rk); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("after a delete in a transaction: %v", err)
	}
}

func TestPartitions(t *testing.T) {
	p := table.Numbered("p", 4, 0)
	if got := strings.Join(p.Names(), ","); got != "p0,p1,p2,p3" {
		t.Errorf("names %s", got)
	}
	// FNV-1a 32 of "hello" is 0x4f9f2cab; mod 4 = 3.
	if got := p.Of("hello"); got != "p3" {
		t.Errorf("Of(hello) = %s, want p3", got)
	}
	one := table.Numbered("", 1, 2)
	if one.Of("anything") != "00" {
		t.Errorf("one partition: %s", one.Of("anything"))
	}
	if _, err := table.NewPartitions("a", "a"); err == nil {
		t.Error("duplicate partitions accepted")
	}
	if _, err := table.NewPartitions(); err == nil {
		t.Error("no partitions accepted")
	}
}
