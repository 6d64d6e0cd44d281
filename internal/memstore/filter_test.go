package memstore

import (
	"testing"
	"time"
)

func testEntity(t *testing.T) *entity {
	t.Helper()
	pk, rk, props, err := decodeEntity([]byte(`{"PartitionKey":"p","RowKey":"r'1",
		"S":"it's","N":5,"L":"9000000000","L@odata.type":"Edm.Int64","D":2.5,"B":true,"F":false,
		"T":"2026-01-02T03:04:05Z","T@odata.type":"Edm.DateTime",
		"G":"4a4b7c3e-0000-4000-8000-0000000000ab","G@odata.type":"Edm.Guid",
		"Bin":"AAEC","Bin@odata.type":"Edm.Binary","Empty":""}`))
	if err != nil {
		t.Fatal(err)
	}
	return &entity{pk: *pk, rk: *rk, props: props, ts: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}
}

// TestFilter: the grammar (quoting included) and Azure's typed,
// three-valued comparisons.
func TestFilter(t *testing.T) {
	e := testEntity(t)
	cases := []struct {
		filter string
		want   bool
	}{
		{"S eq 'it''s'", true},
		{"S eq 'its'", false},
		{"S ne 'its'", true},
		{"S gt 'it'", true},
		{"Empty eq ''", true},
		{"Empty lt 'a'", true},
		{"RowKey eq 'r''1'", true},
		{"PartitionKey eq 'p' and RowKey ge 'r' and RowKey lt 's'", true},
		{"PartitionKey eq 'q' or RowKey eq 'r''1'", true},
		{"N eq 5", true},
		{"N gt 4 and N lt 6", true},
		{"N eq 5L", true},
		{"N eq 5.0", true},
		{"N ge -1", true},
		{"L eq 9000000000L", true},
		{"L eq 9000000000", true},
		{"L gt 5", true},
		{"D eq 2.5", true},
		{"D gt 2", true},
		{"D lt 2.5e0", false},
		{"B eq true", true},
		{"B", true},
		{"not B", false},
		{"F eq false", true},
		{"F lt B", true},
		{"T eq datetime'2026-01-02T03:04:05Z'", true},
		{"T eq datetime'2026-01-02T03:04:05.0000000Z'", true},
		{"T lt datetime'2026-01-02T03:04:05.0000001Z'", true},
		{"T gt datetime'2026-01-02T03:04:05Z'", false},
		{"Timestamp ge datetime'2026-11-26T00:00:00Z'", true},
		{"G eq guid'4A4B7C3E-0000-4000-8000-0000000000AB'", true},
		{"Bin eq X'000102'", true},
		{"Bin eq binary'000103'", false},
		// A property the entity lacks never matches, whatever the logic.
		{"Missing eq 'x'", false},
		{"Missing ne 'x'", false},
		{"not (Missing eq 'x')", false},
		{"not Missing", false},
		{"Missing eq 'x' or S eq 'it''s'", true},
		{"Missing eq 'x' and S eq 'it''s'", false},
		{"not (Missing eq 'x' and S eq 'nope')", true},
		// Values of another type never match either.
		{"S eq 5", false},
		{"S ne 5", false},
		{"N eq '5'", false},
		{"T eq '2026-01-02T03:04:05Z'", false},
		{"G eq '4a4b7c3e-0000-4000-8000-0000000000ab'", false},
		{"B eq 1", false},
		// Parentheses, precedence (and binds tighter than or), spacing.
		{"(S eq 'a' or S eq 'it''s') and N ge 5", true},
		{"S eq 'a' or S eq 'it''s' and N ge 6", false},
		{"((N eq 5))and(B)", true},
		{"  N   eq   5  ", true},
		{"'it''s' eq S", true},
		{"5 lt N", false},
		{"4 lt N", true},
	}
	for _, c := range cases {
		f, err := parseFilter(c.filter)
		if err != nil {
			t.Errorf("%s: %v", c.filter, err)
			continue
		}
		if got := f.eval(e.prop) == triTrue; got != c.want {
			t.Errorf("%s: %v, want %v", c.filter, got, c.want)
		}
	}
	for _, bad := range []string{
		"", "S eq", "S eq 'x", "S eq 'it's'", "(S eq 'x'", "S eq 'x')", "S xx 'x'", "and", "S eq 'x' and",
		"not", "S eq datetime'yesterday'", "S eq guid'x'", "S eq foo'x'", "N eq 5x", "S eq ^", "S eq X'0g'",
	} {
		if _, err := parseFilter(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestKeyRange: the bounds a query's scan takes from its filter.
func TestKeyRange(t *testing.T) {
	for _, c := range []struct {
		filter string
		want   keyRange
	}{
		{"PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'b'", keyRange{pkLo: "p", pkHi: "p", rkLo: "a", rkHi: "b", hasPkLo: true, hasPkHi: true, hasRkLo: true, hasRkHi: true}},
		{"PartitionKey ge 'p0' and PartitionKey le 'p3' and X eq 'y'", keyRange{pkLo: "p0", pkHi: "p3", hasPkLo: true, hasPkHi: true}},
		{"'b' gt RowKey", keyRange{rkHi: "b", hasRkHi: true}},
		{"PartitionKey eq 'p' or PartitionKey eq 'q'", keyRange{}},
		{"not (PartitionKey eq 'p')", keyRange{}},
		{"PartitionKey ne 'p'", keyRange{}},
		{"RowKey eq 5", keyRange{}},
	} {
		f, err := parseFilter(c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := rangeOf(f); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.filter, got, c.want)
		}
	}
}

// TestParseKeys: the keys of an entity's URL, with quoting.
func TestParseKeys(t *testing.T) {
	for _, c := range []struct{ in, pk, rk string }{
		{"PartitionKey='p',RowKey='r')", "p", "r"},
		{"PartitionKey='it''s',RowKey='o''clock')", "it's", "o'clock"},
		{"PartitionKey='',RowKey='')", "", ""},
		{"PartitionKey = 'a b' , RowKey = 'c')", "a b", "c"},
	} {
		pk, rk, err := parseKeys(c.in)
		if err != nil || pk != c.pk || rk != c.rk {
			t.Errorf("%s: %q %q %v", c.in, pk, rk, err)
		}
	}
	for _, bad := range []string{"PartitionKey='it's',RowKey='x')", "RowKey='r',PartitionKey='p')", "PartitionKey='p')", "PartitionKey='p',RowKey='r'"} {
		if _, _, err := parseKeys(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

// TestMessageText: the fast reading of a message body, and its refusal of
// what it does not read (which the XML decoder then reads).
func TestMessageText(t *testing.T) {
	for _, c := range []struct {
		body, want string
		ok         bool
	}{
		{`<QueueMessage><MessageText>plain</MessageText></QueueMessage>`, "plain", true},
		{"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<QueueMessage><MessageText>a&amp;b&lt;&gt;&quot;&apos;&#x9;&#10;</MessageText></QueueMessage>", "a&b<>\"'\t\n", true},
		{`<QueueMessage><MessageText></MessageText></QueueMessage>`, "", true},
		{`<QueueMessage><MessageText><![CDATA[x]]></MessageText></QueueMessage>`, "", false},
		{`<QueueMessage><MessageText>&bogus;</MessageText></QueueMessage>`, "", false},
		{`<QueueMessage> <MessageText>x</MessageText></QueueMessage>`, "", false},
	} {
		got, ok := messageText(c.body)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %q %v", c.body, got, ok)
		}
	}
	r := &request{body: []byte(`<QueueMessage> <MessageText><![CDATA[x<y]]></MessageText></QueueMessage>`)}
	if text, has, err := readText(r); err != nil || !has || text != "x<y" {
		t.Errorf("decoder fallback: %q %v %v", text, has, err)
	}
}
