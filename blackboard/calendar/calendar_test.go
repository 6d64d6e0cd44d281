package calendar

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	ics "github.com/arran4/golang-ical"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

var quiet = slog.New(slog.DiscardHandler)

// memBlobs is an in-memory BlobWriter.
type memBlobs struct {
	mu    sync.Mutex
	blobs map[string][]byte
	types map[string]string
}

func newMemBlobs() *memBlobs {
	return &memBlobs{blobs: map[string][]byte{}, types: map[string]string{}}
}

func (m *memBlobs) WriteBlob(_ context.Context, name, contentType string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[name] = append([]byte(nil), data...)
	m.types[name] = contentType
	return nil
}

func (m *memBlobs) get(t *testing.T, name string) []byte {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[name]
	if !ok {
		t.Fatalf("blob %s not written", name)
	}
	return b
}

// feedServer serves the fixtures with ETags (or only Last-Modified) and
// honours conditional requests, counting 200s and 304s.
type feedServer struct {
	*httptest.Server
	mu           sync.Mutex
	files        map[string][]byte
	lastModified bool // validate with Last-Modified instead of ETag
	ok, notMod   atomic.Int64
	fail         atomic.Bool // answer 500 to everything
}

func newFeedServer(t *testing.T) *feedServer {
	t.Helper()
	fs := &feedServer{files: map[string][]byte{}}
	for _, name := range []string{"westlafcals", "networksierra", "localist", "aroundfred", "malformed", "empty"} {
		b, err := fsReadFile(name + ".ics")
		if err != nil {
			t.Fatal(err)
		}
		fs.files["/"+name+".ics"] = b
	}
	fs.Server = httptest.NewServer(fs)
	t.Cleanup(fs.Close)
	return fs
}

func fsReadFile(name string) ([]byte, error) { return fs.ReadFile(fixtures(), name) }

const modTime = "Tue, 14 Jul 2009 12:12:05 GMT"

func (s *feedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.fail.Load() {
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	body, ok := s.files[r.URL.Path]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(h[:8]) + `"`
	if s.lastModified {
		w.Header().Set("Last-Modified", modTime)
		if r.Header.Get("If-Modified-Since") == modTime {
			s.notMod.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	} else {
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			s.notMod.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	s.ok.Add(1)
	w.Header().Set("Content-Type", "text/calendar; charset=utf-8")
	_, _ = w.Write(body)
}

func (s *feedServer) url(name string) string { return s.URL + "/" + name + ".ics" }

func payload(urls ...string) []byte {
	b, _ := json.Marshal(map[string][]string{"feeds": urls})
	return b
}

func newHandler(t *testing.T, blobs BlobWriter, mod func(*Options)) leasecrontype.Handler {
	t.Helper()
	o := Options{Blobs: blobs, Logger: quiet, Clock: clock.NewFake(time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC))}
	if mod != nil {
		mod(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func task(key string, p []byte) leasecrontype.Task {
	return leasecrontype.Task{ID: key + "@2026-08-01T12:00:00Z", Type: Type, Key: key, Payload: p, Attempt: 1}
}

func readSummary(t *testing.T, b []byte) Summary {
	t.Helper()
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary %s: %v", b, err)
	}
	return s
}

// eventsByUID parses a calendar and indexes its events by UID.
func eventsByUID(t *testing.T, body []byte) (*ics.Calendar, map[string][]*ics.VEvent) {
	t.Helper()
	cal, err := ics.ParseCalendar(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("merged calendar does not parse: %v\n%s", err, body)
	}
	m := map[string][]*ics.VEvent{}
	for _, ev := range cal.Events() {
		id := ev.Id()
		m[id] = append(m[id], ev)
	}
	return cal, m
}

func value(ev *ics.VEvent, p ics.ComponentProperty) string {
	if x := ev.GetProperty(p); x != nil {
		return x.Value
	}
	return ""
}

func TestMergesFourCities(t *testing.T) {
	srv := newFeedServer(t)
	blobs := newMemBlobs()
	h := newHandler(t, blobs, nil)
	var urls []string
	for _, c := range cities {
		urls = append(urls, srv.url(c))
	}
	if err := h(context.Background(), task("elmcity", payload(urls...))); err != nil {
		t.Fatal(err)
	}
	body := blobs.get(t, "calendars/elmcity.ics")
	if !bytes.HasPrefix(body, []byte("BEGIN:VCALENDAR\r\n")) || !bytes.HasSuffix(body, []byte("END:VCALENDAR\r\n")) {
		t.Fatalf("not a CRLF calendar:\n%.200s", body)
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if len(line) > 75 {
			t.Fatalf("line longer than 75 octets: %q", line)
		}
	}
	if ct := blobs.types["calendars/elmcity.ics"]; !strings.HasPrefix(ct, "text/calendar") {
		t.Fatalf("content type %q", ct)
	}
	cal, byUID := eventsByUID(t, body)

	// 28 listed events, 24 distinct: the hackathon is in all four feeds,
	// the bay cleanup in two.
	if n := len(cal.Events()); n != 24 {
		t.Fatalf("%d events, want 24", n)
	}
	if n := len(byUID["hackathon-2026@elmcity.example"]); n != 1 {
		t.Fatalf("hackathon appears %d times", n)
	}
	cleanup := byUID["bay-cleanup-2026@chesapeake.example"]
	if len(cleanup) != 1 || value(cleanup[0], ics.ComponentPropertySequence) != "2" ||
		!strings.Contains(value(cleanup[0], ics.ComponentPropertySummary), "registration required") {
		t.Fatalf("cleanup: want the SEQUENCE 2 copy once, got %d copies", len(cleanup))
	}

	// Recurring series keep their rules, exceptions and overridden instances.
	market := byUID["wl-farmers-market@westlafcals.example"]
	if len(market) != 2 {
		t.Fatalf("farmers market: %d components, want series + override", len(market))
	}
	var series, override *ics.VEvent
	for _, ev := range market {
		if ev.GetProperty(ics.ComponentPropertyRecurrenceId) != nil {
			override = ev
		} else {
			series = ev
		}
	}
	if series == nil || override == nil || value(series, ics.ComponentPropertyRrule) != "FREQ=WEEKLY;BYDAY=WE;COUNT=10" {
		t.Fatalf("farmers market series/override lost: %v %v", series, override)
	}
	rid := override.GetProperty(ics.ComponentPropertyRecurrenceId)
	if rid.Value != "20260930T160000" || rid.ICalParameters["TZID"][0] != "America/Indiana/Indianapolis" {
		t.Fatalf("RECURRENCE-ID %+v", rid)
	}
	if st := byUID["wl-storytime@westlafcals.example"]; len(st) != 1 || value(st[0], ics.ComponentPropertyExdate) != "20261013T101500" {
		t.Fatal("story time EXDATE lost")
	}
	for _, uid := range []string{"ns-open-mic@networksierra.example", "lo-harbor-jazz@localist.example", "af-first-friday@aroundfred.example"} {
		t.Run(uid, func(t *testing.T) {
			if len(byUID[uid]) != 2 {
				t.Errorf("%s: %d components, want series + override", uid, len(byUID[uid]))
			}
		})
	}

	// Time zones: every TZID in use has its VTIMEZONE; values keep their zone.
	zones := map[string]bool{}
	for _, z := range cal.Timezones() {
		zones[tzid(z)] = true
		if len(z.Components) != 2 {
			t.Errorf("VTIMEZONE %s lost its STANDARD/DAYLIGHT rules", tzid(z))
		}
	}
	for _, want := range []string{"America/Indiana/Indianapolis", "America/Los_Angeles", "America/New_York", "Europe/London"} {
		t.Run(want, func(t *testing.T) {
			if !zones[want] {
				t.Errorf("VTIMEZONE %s missing (have %v)", want, zones)
			}
		})
	}
	sister := byUID["af-sister-city@aroundfred.example"][0].GetProperty(ics.ComponentPropertyDtStart)
	if sister.Value != "20261014T190000" || sister.ICalParameters["TZID"][0] != "Europe/London" {
		t.Fatalf("DTSTART %+v", sister)
	}
	when, err := byUID["af-sister-city@aroundfred.example"][0].GetStartAt()
	if err == nil && !when.Equal(time.Date(2026, 10, 14, 18, 0, 0, 0, time.UTC)) {
		t.Fatalf("sister city event at %v, want 18:00 UTC", when.UTC())
	}
	if ds := byUID["ns-library-webinar@networksierra.example"][0].GetProperty(ics.ComponentPropertyDtStart); ds.ICalParameters["TZID"][0] != "America/New_York" {
		t.Fatalf("webinar zone %+v", ds)
	}
	if ds := byUID["wl-harvest-fest@westlafcals.example"][0].GetProperty(ics.ComponentPropertyDtStart); ds.Value != "20261010" || ds.ICalParameters["VALUE"][0] != "DATE" {
		t.Fatalf("all-day DTSTART %+v", ds)
	}

	// Text survives escaping; list properties and alarms survive.
	if d := value(series, ics.ComponentPropertyDescription); !strings.HasPrefix(d, "Local growers, bakers and a bluegrass trio") {
		t.Fatalf("description %q", d)
	}
	if n := len(series.GetProperties(ics.ComponentPropertyCategories)); n != 2 {
		t.Fatalf("%d CATEGORIES, want 2", n)
	}
	if leaf := byUID["wl-leaf-pickup@westlafcals.example"][0]; len(leaf.Alarms()) != 1 {
		t.Fatal("VALARM lost")
	}
	// Events come in start order.
	var prev time.Time
	for _, ev := range cal.Events() {
		s := parseICalTime(ev.GetProperty(ics.ComponentPropertyDtStart))
		if s.Before(prev) {
			t.Fatalf("events out of order at %s", ev.Id())
		}
		prev = s
	}

	sum := readSummary(t, blobs.get(t, "calendars/elmcity.json"))
	if sum.Key != "elmcity" || sum.Events != 24 || sum.Duplicates != 4 || !sum.Written || len(sum.Feeds) != 4 ||
		len(sum.Timezones) != 4 || len(sum.MissingTimezones) != 0 || sum.Task != "elmcity@2026-08-01T12:00:00Z" {
		t.Fatalf("summary %+v", sum)
	}
	for _, f := range sum.Feeds {
		if f.Status != StatusOK || f.Events != 7 || f.HTTPStatus != 200 || f.Error != "" || f.Bytes == 0 {
			t.Errorf("feed %+v", f)
		}
	}
}

func TestConditionalGetReusesCachedCopy(t *testing.T) {
	for _, lm := range []bool{false, true} {
		t.Run(map[bool]string{false: "etag", true: "last-modified"}[lm], func(t *testing.T) {
			srv := newFeedServer(t)
			srv.lastModified = lm
			blobs := newMemBlobs()
			h := newHandler(t, blobs, nil)
			p := payload(srv.url("westlafcals"), srv.url("localist"))
			if err := h(context.Background(), task("k", p)); err != nil {
				t.Fatal(err)
			}
			first := blobs.get(t, "calendars/k.ics")
			if err := h(context.Background(), task("k", p)); err != nil {
				t.Fatal(err)
			}
			if srv.ok.Load() != 2 || srv.notMod.Load() != 2 {
				t.Fatalf("%d full responses, %d not-modified; want 2 and 2", srv.ok.Load(), srv.notMod.Load())
			}
			if second := blobs.get(t, "calendars/k.ics"); !bytes.Equal(first, second) {
				t.Fatal("output changed on a 304")
			}
			sum := readSummary(t, blobs.get(t, "calendars/k.json"))
			for _, f := range sum.Feeds {
				if f.Status != StatusNotModified || f.HTTPStatus != 304 || f.Events != 7 {
					t.Errorf("feed %+v", f)
				}
			}
			if sum.Events != 13 || sum.Duplicates != 1 {
				t.Fatalf("summary %+v", sum)
			}
		})
	}
}

// hugeFeed writes a valid calendar of at least size bytes.
func hugeFeed(w io.Writer, size int) {
	n, _ := io.WriteString(w, "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//huge//EN\r\n")
	for i := 0; n < size; i++ {
		k, err := fmt.Fprintf(w, "BEGIN:VEVENT\r\nUID:huge-%d@example\r\nDTSTAMP:20260801T120000Z\r\nDTSTART:20261001T100000Z\r\nSUMMARY:Event number %d of a very large feed\r\nEND:VEVENT\r\n", i, i)
		if err != nil {
			return
		}
		n += k
	}
	_, _ = io.WriteString(w, "END:VCALENDAR\r\n")
}

func TestFailedFeedsAreRecordedAndOthersStillMerge(t *testing.T) {
	srv := newFeedServer(t)
	const limit = 256 << 10
	mux := http.NewServeMux()
	mux.HandleFunc("/huge-stream.ics", func(w http.ResponseWriter, _ *http.Request) { hugeFeed(w, 2*limit) }) // chunked, no length
	mux.HandleFunc("/huge-announced.ics", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		hugeFeed(&b, 2*limit)
		w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
		_, _ = w.Write(b.Bytes())
	})
	mux.HandleFunc("/slow.ics", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/html.ics", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "<!doctype html><title>Calendar moved</title>")
	})
	mux.HandleFunc("/truncated.ics", func(w http.ResponseWriter, _ *http.Request) {
		b, _ := fsReadFile("localist.ics")
		_, _ = w.Write(b[:len(b)/2])
	})
	extra := httptest.NewServer(mux)
	defer extra.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL + "/closed.ics"
	gone.Close() // connection refused

	blobs := newMemBlobs()
	h := newHandler(t, blobs, func(o *Options) { o.MaxFeedSize = limit; o.Timeout = 300 * time.Millisecond })
	feeds := []string{
		srv.url("westlafcals"), srv.url("malformed"), srv.url("empty"),
		extra.URL + "/huge-stream.ics", extra.URL + "/huge-announced.ics",
		goneURL, srv.URL + "/nosuch.ics", extra.URL + "/slow.ics", extra.URL + "/html.ics", extra.URL + "/truncated.ics",
	}
	start := time.Now()
	err := h(context.Background(), task("mixed", payload(feeds...)))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("handler took %v", took)
	}
	var fe *FeedsError
	if !errors.As(err, &fe) || fe.Total != len(feeds) || len(fe.Failed) != len(feeds)-1 {
		t.Fatalf("error %v: want a FeedsError with %d failures", err, len(feeds)-1)
	}
	for i, want := range []error{ErrFeedMalformed, ErrFeedEmpty, ErrFeedTooLarge, ErrFeedUnreachable} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if !errors.Is(err, want) {
				t.Errorf("error does not wrap %v", want)
			}
		})
	}
	if msg := err.Error(); !strings.Contains(msg, "9 of 10 feeds failed") || strings.Contains(msg, "\n") {
		t.Fatalf("error message %q", msg)
	}
	// The good feed is still merged and written.
	_, byUID := eventsByUID(t, blobs.get(t, "calendars/mixed.ics"))
	if len(byUID) != 6 || byUID["wl-symphony-fall@westlafcals.example"] == nil {
		t.Fatalf("merged UIDs %d", len(byUID))
	}
	sum := readSummary(t, blobs.get(t, "calendars/mixed.json"))
	wantErr := map[string]string{
		srv.url("malformed"):              "feed malformed",
		srv.url("empty"):                  "feed empty",
		extra.URL + "/huge-stream.ics":    "feed too large: more than",
		extra.URL + "/huge-announced.ics": "feed too large: ",
		goneURL:                           "feed unreachable",
		srv.URL + "/nosuch.ics":           "HTTP 404",
		extra.URL + "/slow.ics":           "timed out after 300ms",
		extra.URL + "/html.ics":           "not an iCalendar stream",
		extra.URL + "/truncated.ics":      "truncated",
	}
	for _, f := range sum.Feeds {
		if f.URL == srv.url("westlafcals") {
			if f.Status != StatusOK || f.Events != 7 {
				t.Errorf("good feed %+v", f)
			}
			continue
		}
		if f.Status != StatusFailed || !strings.Contains(f.Error, wantErr[f.URL]) || f.Events != 0 {
			t.Errorf("feed %s: %+v, want failed with %q", f.URL, f, wantErr[f.URL])
		}
	}
	if !sum.Written || sum.Events != 7 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestAllFeedsFailedKeepsPreviousCalendar(t *testing.T) {
	srv := newFeedServer(t)
	blobs := newMemBlobs()
	h := newHandler(t, blobs, nil)
	p := payload(srv.url("aroundfred"))
	if err := h(context.Background(), task("aroundfred", p)); err != nil {
		t.Fatal(err)
	}
	good := blobs.get(t, "calendars/aroundfred.ics")
	srv.fail.Store(true)
	err := h(context.Background(), task("aroundfred", p))
	if !errors.Is(err, ErrFeedUnreachable) || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("error %v", err)
	}
	if !bytes.Equal(blobs.get(t, "calendars/aroundfred.ics"), good) {
		t.Fatal("the last good calendar was overwritten")
	}
	if sum := readSummary(t, blobs.get(t, "calendars/aroundfred.json")); sum.Written || sum.Feeds[0].Status != StatusFailed {
		t.Fatalf("summary %+v", sum)
	}
}

func TestDuplicatesResolvedBySequenceThenModified(t *testing.T) {
	ev := func(seq, mod, summary string) string {
		return "BEGIN:VEVENT\r\nUID:same@x\r\nDTSTAMP:20260101T000000Z\r\nSEQUENCE:" + seq + "\r\nLAST-MODIFIED:" + mod +
			"\r\nDTSTART:20261001T100000Z\r\nSUMMARY:" + summary + "\r\nEND:VEVENT\r\n"
	}
	cal := func(events ...string) *feed {
		f, err := parseFeed([]byte("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\n" + strings.Join(events, "") + "END:VCALENDAR\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		feeds []*feed
		want  string
	}{
		{[]*feed{cal(ev("1", "20260101T000000Z", "old")), cal(ev("2", "20250101T000000Z", "newer sequence"))}, "newer sequence"},
		{[]*feed{cal(ev("2", "20260101T000000Z", "higher first")), cal(ev("1", "20270101T000000Z", "lower"))}, "higher first"},
		{[]*feed{cal(ev("1", "20260101T000000Z", "a")), cal(ev("1", "20260601T000000Z", "later modified"))}, "later modified"},
		{[]*feed{cal(ev("1", "20260101T000000Z", "first feed")), cal(ev("1", "20260101T000000Z", "second feed"))}, "first feed"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var outs []outcome
			for _, f := range tc.feeds {
				outs = append(outs, outcome{feed: f})
			}
			m := merge("k", outs)
			if len(m.events) != 1 || m.duplicates != 1 || value(m.events[0], ics.ComponentPropertySummary) != tc.want {
				t.Errorf("kept %q, want %q", value(m.events[0], ics.ComponentPropertySummary), tc.want)
			}
		})
	}
	// Same UID, different RECURRENCE-ID: both kept.
	f := cal(ev("0", "20260101T000000Z", "series"),
		strings.Replace(ev("0", "20260101T000000Z", "instance"), "DTSTART:", "RECURRENCE-ID:20261008T100000Z\r\nDTSTART:", 1))
	if m := merge("k", []outcome{{feed: f}}); len(m.events) != 2 || m.duplicates != 0 {
		t.Fatalf("series and instance: %d events, %d duplicates", len(m.events), m.duplicates)
	}
	// A zone used but defined nowhere is reported.
	g := cal(strings.Replace(ev("0", "x", "zoned"), "DTSTART:20261001T100000Z", "DTSTART;TZID=Mars/Olympus_Mons:20261001T100000", 1))
	if m := merge("k", []outcome{{feed: g}}); len(m.missing) != 1 || m.missing[0] != "Mars/Olympus_Mons" {
		t.Fatalf("missing zones %v", m.missing)
	}
}

func TestParsePayload(t *testing.T) {
	got, err := ParsePayload([]byte("\ufeff# West Lafayette\nhttp://a.example/x.ics\n\n  webcal://b.example/y.ics  \nhttp://a.example/x.ics#frag\n"))
	if err != nil || strings.Join(got, " ") != "http://a.example/x.ics https://b.example/y.ics" {
		t.Fatalf("lines: %v, %v", got, err)
	}
	got, err = ParsePayload([]byte(`{"feeds": ["https://c.example/z.ics"]}`))
	if err != nil || len(got) != 1 || got[0] != "https://c.example/z.ics" {
		t.Fatalf("json: %v, %v", got, err)
	}
	for _, bad := range []string{"", "  \n# only a comment\n", `{"feeds": []}`, `{"feed": ["http://a.example"]}`, `{"feeds": "x"}`,
		"ftp://a.example/x.ics", "file:///etc/passwd", "http:///nohost.ics", "not a url at all"} {
		t.Run(bad, func(t *testing.T) {
			if _, err := ParsePayload([]byte(bad)); !errors.Is(err, ErrBadPayload) {
				t.Errorf("ParsePayload(%q) = %v, want ErrBadPayload", bad, err)
			}
		})
	}
	many := strings.Repeat("http://a.example/x.ics\n", 1)
	for i := range DefaultMaxFeeds {
		many += fmt.Sprintf("http://a.example/%d.ics\n", i)
	}
	if _, err := ParsePayload([]byte(many)); !errors.Is(err, ErrBadPayload) || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("too many feeds: %v", err)
	}
}

func TestPlainTextPayloadAndBadTasks(t *testing.T) {
	srv := newFeedServer(t)
	blobs := newMemBlobs()
	h := newHandler(t, blobs, nil)
	if err := h(context.Background(), task("sonora", []byte(srv.url("networksierra")+"\n"))); err != nil {
		t.Fatal(err)
	}
	if sum := readSummary(t, blobs.get(t, "calendars/sonora.json")); sum.Events != 7 {
		t.Fatalf("summary %+v", sum)
	}
	n := len(blobs.blobs)
	for _, tk := range []leasecrontype.Task{
		{ID: "x", Payload: payload(srv.url("localist"))}, // no key
		task("bad/key", payload(srv.url("localist"))),
		task("k", []byte("gopher://x")),
	} {
		if err := h(context.Background(), tk); !errors.Is(err, ErrBadPayload) {
			t.Errorf("task %+v: %v, want ErrBadPayload", tk, err)
		}
	}
	if len(blobs.blobs) != n {
		t.Fatal("a refused task wrote blobs")
	}
}

func TestOptionsValidation(t *testing.T) {
	bad, err := container.NewClientWithNoCredential("http://127.0.0.1:1/devstoreaccount1/Bad_Name", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewBlobWriter(bad); err == nil || !strings.Contains(err.Error(), "Bad_Name") {
		t.Errorf("NewBlobWriter(container Bad_Name) = %v, want an error naming it", err)
	}
	if _, err := NewBlobWriter(nil); err == nil {
		t.Error("NewBlobWriter(nil) accepted")
	}
	for i, o := range []Options{
		{},
		{Blobs: newMemBlobs(), Timeout: -1},
		{Blobs: newMemBlobs(), MaxFeedSize: -1},
		{Blobs: newMemBlobs(), Concurrency: -1},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if _, err := New(o); err == nil {
				t.Errorf("New(%+v) accepted", o)
			} else if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
			}
		})
	}
}

func TestFixturesParse(t *testing.T) {
	for _, c := range cities {
		b, err := fsReadFile(c + ".ics")
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseFeed(b)
		if err != nil || len(f.events) != 7 {
			t.Fatalf("%s: %v", c, err)
		}
	}
	b, _ := fsReadFile("malformed.ics")
	if _, err := parseFeed(b); !errors.Is(err, ErrFeedMalformed) {
		t.Fatalf("malformed.ics: %v", err)
	}
	b, _ = fsReadFile("empty.ics")
	if _, err := parseFeed(b); !errors.Is(err, ErrFeedEmpty) {
		t.Fatalf("empty.ics: %v", err)
	}
	var huge bytes.Buffer
	hugeFeed(&huge, 1<<20)
	if f, err := parseFeed(huge.Bytes()); err != nil || len(f.events) < 5000 {
		t.Fatalf("huge feed is valid apart from its size: %v", err)
	}
}
