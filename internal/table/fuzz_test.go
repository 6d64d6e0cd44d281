package table_test

import (
	"testing"

	"github.com/leasecron/leasecron/internal/table"
)

// FuzzDecode: any bytes the service (or a proxy, or another writer) might
// return as an entity decode or are refused, never a panic; a decoded
// entity keeps the raw text it came from.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"PartitionKey":"00","RowKey":"k","Timestamp":"2026-01-02T03:04:05.1234567Z","Message":"m","Seq":"7","Seq@odata.type":"Edm.Int64","When":"2026-01-02T03:04:05Z","When@odata.type":"Edm.DateTime","Ok":true,"N":3.5,"B":"AAE=","B@odata.type":"Edm.Binary"}`,
		`{"PartitionKey":1}`, `{"RowKey":null}`, `{"Seq":"x","Seq@odata.type":"Edm.Int64"}`, `{"When":"never","When@odata.type":"Edm.DateTime"}`,
		`{"B":"!!","B@odata.type":"Edm.Binary"}`, `{"G":"x","G@odata.type":"Edm.Guid"}`, `{"N":1e999}`, `[]`, `"s"`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := table.Decode(raw, `W/"etag"`)
		if err != nil {
			return
		}
		if e.Raw != string(raw) {
			t.Fatalf("decoded entity lost its raw text")
		}
		for k := range e.Props {
			_ = e.Props.Str(k)
			_ = e.Props.Int(k)
			_ = e.Props.Bool(k)
			_ = e.Props.Time(k)
			_, _, _ = e.Props.StrictString(k)
			_, _, _ = e.Props.StrictInt(k)
		}
	})
}

// FuzzContinuation: CheckContinuation accepts only the package's own
// form, and never a token with a control character.
func FuzzContinuation(f *testing.F) {
	for _, s := range []string{"00\nk", "\n", "1!8!MDA-\n1!12!azE-", "garbage", "a\x00\nb", "a\n\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if table.CheckContinuation(s) != nil {
			return
		}
		for _, r := range s {
			if r != '\n' && (r < 0x20 || r == 0x7f) {
				t.Fatalf("CheckContinuation accepted %q", s)
			}
		}
	})
}
