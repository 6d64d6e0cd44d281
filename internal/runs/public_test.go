package runs

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// TestRunRowKeepsEveryField fails when leasecrontype.Run gains a field that
// the run row does not store: a record whose every field holds a distinct
// value comes back the same through the row's encoding.
func TestRunRowKeepsEveryField(t *testing.T) {
	var r Run
	rv := reflect.ValueOf(&r.Run).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f, name := rv.Field(i), rv.Type().Field(i).Name
		switch {
		case name == "Updated", name == "Version":
			// Set by the service on every write, not stored by us.
		case name == "State":
			f.SetString(string(Running))
		case name == "ID":
			f.SetString("the-id")
		case name == "Series":
			f.SetString("") // only an occurrence's id gives one (tested in TestKeys)
		case f.Kind() == reflect.String:
			f.SetString(name)
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(int64(i + 1))
		case f.Type() == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(t0.Add(time.Duration(i) * time.Minute)))
		case f.Type() == reflect.TypeOf([]string{}):
			f.Set(reflect.ValueOf([]string{name + "-1", name + "-2"}))
		case f.Type() == reflect.TypeOf(leasecrontype.RunProgress{}):
			f.Set(reflect.ValueOf(leasecrontype.RunProgress{Percent: i, Message: name, At: t0.Add(time.Duration(i) * time.Minute)}))
		default:
			t.Fatalf("field %s of kind %s: teach this test about it", name, f.Kind())
		}
	}
	b, err := table.Encode(DefaultLayout.home(bucketKey(r.ID)), runKey(r.ID), runProps(r))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := table.Decode(b, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeRun(rw).Run; !reflect.DeepEqual(got, r.Run) {
		t.Fatalf("through the row:\n got %+v\nwant %+v", got, r.Run)
	}
}

// A record's withdrawn due times survive the row: all of them through
// WithdrawnDues, the latest in Withdrawn as earlier releases read it; and
// a Withdrawn an earlier release changed beside a list it did not know
// counts too.
func TestWithdrawnDuesThroughTheRow(t *testing.T) {
	r := newRun("id", Queued)
	a, b, c := t0, t0.Add(time.Minute), t0.Add(2*time.Minute)
	r.Withdrawn = dues{}.with(a, b)
	p := runProps(r)
	if w, ok := p["Withdrawn"].(time.Time); !ok || !w.Equal(b) {
		t.Fatalf("Withdrawn = %v; want the latest, %v", p["Withdrawn"], b)
	}
	if got := withdrawnOf(table.Props(p)); !got.has(a) || !got.has(b) || len(got) != 2 {
		t.Fatalf("read back: %v; want both", got)
	}
	p["Withdrawn"] = c // an earlier release's change
	if got := withdrawnOf(table.Props(p)); !got.has(a) || !got.has(b) || !got.has(c) {
		t.Fatalf("with Withdrawn changed beside the list: %v; want all three", got)
	}
	delete(p, "WithdrawnDues") // an earlier release's row
	if got := withdrawnOf(table.Props(p)); len(got) != 1 || !got.has(c) {
		t.Fatalf("from Withdrawn alone: %v", got)
	}
}
