package runs

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// FuzzContinue: a continuation token of any text is either one this query
// returned (same fingerprint and partitions, keys a key can be) or
// ErrBadContinue — never a query with a forged key, never a panic.
func FuzzContinue(f *testing.F) {
	q := Query{State: Failed, Type: "mail"}
	fp := q.fingerprint()
	good, _ := json.Marshal(cursor{Q: fp, Last: []string{"k1", ""}, Done: []bool{false, true}})
	forged, _ := json.Marshal(cursor{Q: fp, Last: []string{"a\x00'", ""}, Done: []bool{false, false}})
	for _, s := range []string{"", "garbage", base64.RawURLEncoding.EncodeToString(good), base64.RawURLEncoding.EncodeToString(forged),
		base64.RawURLEncoding.EncodeToString([]byte(`{"Q":1}`)), base64.RawURLEncoding.EncodeToString([]byte(`null`))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		cur, err := decodeCursor(tok, fp, 2)
		if err != nil {
			if !strings.Contains(err.Error(), ErrBadContinue.Error()) {
				t.Fatalf("decodeCursor(%q) = %v: not ErrBadContinue", tok, err)
			}
			return
		}
		if cur.Q != fp || len(cur.Last) != 2 || len(cur.Done) != 2 {
			t.Fatalf("decodeCursor(%q) = %+v", tok, cur)
		}
		for _, l := range cur.Last {
			if l != "" && storage.ValidateKeyPart("key", l) != nil {
				t.Fatalf("decodeCursor(%q) accepted key %q", tok, l)
			}
		}
	})
}

// FuzzDecodeRun: a run row of any shape (an older release's, another
// writer's, a damaged one) reads as a run, never a panic.
func FuzzDecodeRun(f *testing.F) {
	for _, s := range []string{
		`{"PartitionKey":"r","RowKey":"job-1","Id":"job-1","State":"succeeded","Type":"mail","Attempts":2,"Started":"2026-01-02T03:04:05Z","Started@odata.type":"Edm.DateTime","Output":"ok"}`,
		`{"PartitionKey":"r","RowKey":"x","State":"sleeping","Attempts":"many"}`,
		`{"PartitionKey":"l-failed","RowKey":"9999_x","Id":"x","Due":"garbage","Due@odata.type":"Edm.DateTime"}`,
		`{"PartitionKey":"r","RowKey":"s@1","Slots":"not json"}`,
		`{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := table.Decode([]byte(raw), "")
		if err != nil {
			return
		}
		r := decodeRun(e)
		_ = r.Public()
		_ = decodeSlots(e.Props)
	})
}
