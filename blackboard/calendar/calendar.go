// Package calendar is the blackboard's reference workload, after the elmcity
// calendar aggregator: the "calendar" handler type fetches a key's iCalendar
// feeds, merges them into one calendar without duplicates, and writes it to
// blob storage with a JSON summary beside it.
//
// # Payload
//
// A key's payload lists its feeds, either as JSON
//
//	{"feeds": ["https://example.org/events.ics", "http://other.example/cal.ics"]}
//
// or as plain text, one URL per line (blank lines and lines starting with #
// are ignored). URLs must be http, https or webcal (read as https).
//
// # Output
//
// For the key K (Task.Key), the handler writes calendars/K.ics (the merged
// calendar) and then calendars/K.json (a [Summary]) through its
// [BlobWriter]: [NewBlobWriter] puts them in an Azure blob container
// (leasecron's worker uses names.container, "leasecron" by default). Events are de-duplicated by (UID, RECURRENCE-ID):
// an event listed by several feeds appears once, the copy with the highest
// SEQUENCE (then the latest LAST-MODIFIED or DTSTAMP, then the earliest
// feed) winning. Recurring events keep their RRULE, EXDATE and RDATE, and
// overridden instances (RECURRENCE-ID) are kept beside their series. Every
// VTIMEZONE an event refers to by TZID is copied from the first feed that
// defines it.
//
// # Failures
//
// A feed that cannot be fetched (network error, timeout, HTTP error), is
// larger than MaxFeedSize, is empty, or is not a well-formed iCalendar
// stream is recorded in the summary and left out; the remaining feeds are
// still merged and written, and the handler returns a [*FeedsError] naming
// the failed feeds (so the blackboard shows it as LastError). When every
// feed failed, the previous calendar is kept and only the summary is
// rewritten.
//
// # Conditional requests
//
// The handler remembers, per feed URL and per process, the ETag and
// Last-Modified of the last good response with its parsed events, and sends
// If-None-Match / If-Modified-Since. A 304 reuses the remembered copy, so an
// unchanged feed costs one small request and the output stays identical.
package calendar

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Type is the handler type name under which New's handler is registered.
const Type = "calendar"

// Defaults and limits.
const (
	// DefaultTimeout bounds the fetch of one feed, body included.
	DefaultTimeout = 15 * time.Second
	// DefaultMaxFeedSize is the largest feed body read, in bytes (5 MiB).
	DefaultMaxFeedSize = 5 << 20
	// DefaultMaxFeeds is how many feeds one key may list.
	DefaultMaxFeeds = 100
	// DefaultConcurrency is how many feeds of one key are fetched at once.
	DefaultConcurrency = 4
	// DefaultUserAgent is sent with every feed request.
	DefaultUserAgent = "leasecron-calendar/1"
)

// Sentinel errors. Per-feed errors are reported inside a *FeedsError.
var (
	// ErrBadPayload: the payload lists no feeds, is malformed, or names a
	// URL that is not http(s) or webcal. Nothing is fetched or written.
	ErrBadPayload = errors.New("bad calendar payload")
	// ErrFeedUnreachable: the request failed, timed out, or got an HTTP
	// status other than 2xx or 304.
	ErrFeedUnreachable = errors.New("feed unreachable")
	// ErrFeedTooLarge: the body exceeded MaxFeedSize.
	ErrFeedTooLarge = errors.New("feed too large")
	// ErrFeedEmpty: the body was empty (or only white space).
	ErrFeedEmpty = errors.New("feed empty")
	// ErrFeedMalformed: the body is not a well-formed iCalendar stream.
	ErrFeedMalformed = errors.New("feed malformed")
	// ErrInvalidOptions is wrapped by New's errors about its Options.
	ErrInvalidOptions = errors.New("invalid calendar options")
)

// FeedsError reports the feeds of one run that failed. The other feeds were
// merged and written. errors.Is sees each feed's error (ErrFeedTooLarge…).
type FeedsError struct {
	// Key is the blackboard key.
	Key string
	// Total is how many feeds the key lists.
	Total int
	// Failed are the failed feeds, in payload order.
	Failed []FeedFailure
}

// FeedFailure is one failed feed.
type FeedFailure struct {
	URL string
	Err error
}

// Error implements error: one line naming every failed feed.
func (e *FeedsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "calendar %s: %d of %d feeds failed", e.Key, len(e.Failed), e.Total)
	for i, f := range e.Failed {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s: %v", sep, storage.Redact(f.URL), f.Err)
	}
	return b.String()
}

// Unwrap returns the per-feed errors.
func (e *FeedsError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f.Err
	}
	return out
}

// Options configure the handler. Zero values mean the documented defaults.
type Options struct {
	// Blobs receives the output (see NewBlobWriter). Required.
	Blobs BlobWriter
	// HTTPClient fetches feeds. Default: a client of its own on
	// http.DefaultTransport (redirects followed); Timeout bounds each feed.
	HTTPClient *http.Client
	// Timeout bounds the fetch of one feed. Default DefaultTimeout (15 s).
	Timeout time.Duration
	// MaxFeedSize is the largest feed accepted, in bytes. Default
	// DefaultMaxFeedSize (5 MiB).
	MaxFeedSize int64
	// MaxFeeds is how many feeds one payload may list. Default
	// DefaultMaxFeeds.
	MaxFeeds int
	// Concurrency is how many feeds are fetched at once. Default
	// DefaultConcurrency.
	Concurrency int
	// UserAgent is sent with each request. Default DefaultUserAgent.
	UserAgent string
	// Clock stamps the summary. Default the real clock.
	Clock clock.Clock
	// Logger receives logs. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.HTTPClient = cmp.Or(o.HTTPClient, &http.Client{})
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	o.MaxFeedSize = cmp.Or(o.MaxFeedSize, DefaultMaxFeedSize)
	o.MaxFeeds = cmp.Or(o.MaxFeeds, DefaultMaxFeeds)
	o.Concurrency = cmp.Or(o.Concurrency, DefaultConcurrency)
	o.UserAgent = cmp.Or(o.UserAgent, DefaultUserAgent)
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if o.Blobs == nil {
		return fmt.Errorf("%w: calendar.Options.Blobs is nil: pass NewBlobWriter(containerClient) or a BlobWriter of your own", ErrInvalidOptions)
	}
	return opt.First(
		opt.Positive(ErrInvalidOptions, "calendar.Options.Timeout", o.Timeout, DefaultTimeout),
		opt.Positive(ErrInvalidOptions, "calendar.Options.MaxFeedSize", o.MaxFeedSize, DefaultMaxFeedSize),
		opt.Positive(ErrInvalidOptions, "calendar.Options.MaxFeeds", o.MaxFeeds, DefaultMaxFeeds),
		opt.Positive(ErrInvalidOptions, "calendar.Options.Concurrency", o.Concurrency, DefaultConcurrency),
	)
}

// New returns the calendar handler. Register it under Type. One handler
// may serve many keys at once; it keeps its conditional-request cache for
// its lifetime.
func New(opts Options) (leasecrontype.Handler, error) {
	o := opts.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.Logger = o.Logger.With("component", "calendar")
	m := &merger{opts: o, cache: map[string]*cacheEntry{}}
	return m.handle, nil
}

// BlobNames returns the names of the merged calendar and of its summary for
// key, relative to the container.
func BlobNames(key string) (ics, summary string) {
	return "calendars/" + key + ".ics", "calendars/" + key + ".json"
}

// Feed statuses in a Summary.
const (
	// StatusOK: fetched and parsed.
	StatusOK = "ok"
	// StatusNotModified: the server answered 304; the remembered copy was used.
	StatusNotModified = "not-modified"
	// StatusFailed: left out; see Error.
	StatusFailed = "failed"
)

// Summary is the JSON written beside the merged calendar.
type Summary struct {
	// Key is the blackboard key; Task the task id of the run.
	Key  string `json:"key"`
	Task string `json:"task,omitempty"`
	// Feeds reports each feed, in payload order.
	Feeds []FeedResult `json:"feeds"`
	// Events is how many events the merged calendar holds; Duplicates how
	// many listed events were dropped as copies of another.
	Events     int `json:"events"`
	Duplicates int `json:"duplicates"`
	// Timezones are the VTIMEZONEs included; MissingTimezones TZIDs that
	// events use but no feed defines.
	Timezones        []string `json:"timezones"`
	MissingTimezones []string `json:"missing_timezones,omitempty"`
	// Written reports whether the calendar blob was (re)written: false when
	// every feed failed and the previous calendar was kept.
	Written bool `json:"written"`
	// Generated is when the summary was made.
	Generated time.Time `json:"generated"`
}

// FeedResult is one feed's line in a Summary.
type FeedResult struct {
	URL        string `json:"url"`
	Status     string `json:"status"`
	HTTPStatus int    `json:"http_status,omitempty"`
	// Events is how many VEVENTs the feed holds.
	Events     int    `json:"events"`
	Bytes      int64  `json:"bytes,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// ParsePayload returns the feed URLs a payload lists (see the package
// documentation for the two formats), de-duplicated, in order. Errors wrap
// ErrBadPayload and name the offending entry. The CLI can call it to refuse
// a bad payload before adding a key.
func ParsePayload(payload []byte) ([]string, error) {
	return parsePayload(payload, DefaultMaxFeeds)
}

func parsePayload(payload []byte, maxFeeds int) ([]string, error) {
	p := bytes.TrimSpace(bytes.TrimPrefix(payload, []byte("\xef\xbb\xbf")))
	var raw []string
	if bytes.HasPrefix(p, []byte("{")) {
		var doc struct {
			Feeds []string `json:"feeds"`
		}
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf(`%w: not {"feeds": [urls...]}: %w`, ErrBadPayload, err)
		}
		raw = doc.Feeds
	} else {
		for _, line := range strings.Split(string(p), "\n") {
			line = strings.TrimSpace(line)
			if line != "" && !strings.HasPrefix(line, "#") {
				raw = append(raw, line)
			}
		}
	}
	seen := map[string]bool{}
	var out []string
	for i, u := range raw {
		u = strings.TrimSpace(u)
		norm, err := normalizeURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: feed %d %q: %w", ErrBadPayload, i+1, storage.Redact(u), err)
		}
		if !seen[norm] {
			seen[norm] = true
			out = append(out, norm)
		}
	}
	switch {
	case len(out) == 0:
		return nil, fmt.Errorf(`%w: no feeds listed: give {"feeds": [urls...]} or one URL per line`, ErrBadPayload)
	case len(out) > maxFeeds:
		return nil, fmt.Errorf("%w: %d feeds listed, at most %d accepted", ErrBadPayload, len(out), maxFeeds)
	}
	return out, nil
}

func normalizeURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "webcal", "webcals":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("scheme %q: only http, https and webcal feeds are fetched", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	u.Fragment = ""
	return u.String(), nil
}

// merger is the handler's state: options and the conditional-GET cache.
type merger struct {
	opts  Options
	mu    sync.Mutex
	cache map[string]*cacheEntry
}

func (m *merger) handle(ctx context.Context, t leasecrontype.Task) error {
	key := t.Key
	if key == "" {
		return fmt.Errorf("%w: task %s has no blackboard key (the calendar handler runs on the blackboard)", ErrBadPayload, t.ID)
	}
	if err := storage.ValidateKeyPart("calendar key", key); err != nil {
		return fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	feeds, err := parsePayload(t.Payload, m.opts.MaxFeeds)
	if err != nil {
		return fmt.Errorf("calendar %s: %w", key, err)
	}
	log := m.opts.Logger.With("key", key, "task_id", t.ID)

	outcomes := m.fetchAll(ctx, feeds)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("calendar %s: %w", key, err)
	}
	merged := merge(key, outcomes)

	sum := Summary{Key: key, Task: t.ID, Events: len(merged.events), Duplicates: merged.duplicates,
		Timezones: merged.timezones, MissingTimezones: merged.missing, Generated: m.opts.Clock.Now().UTC()}
	var failed []FeedFailure
	for _, o := range outcomes {
		sum.Feeds = append(sum.Feeds, o.result)
		if o.err != nil {
			failed = append(failed, FeedFailure{URL: o.result.URL, Err: o.err})
			log.Warn("feed failed", "url", storage.Redact(o.result.URL), "err", o.err)
		}
	}
	icsName, sumName := BlobNames(key)
	if len(failed) < len(feeds) {
		body, err := merged.serialize()
		if err != nil {
			return fmt.Errorf("calendar %s: serialize: %w", key, err)
		}
		if err := m.opts.Blobs.WriteBlob(ctx, icsName, "text/calendar; charset=utf-8", body); err != nil {
			return fmt.Errorf("calendar %s: write %s: %w", key, icsName, err)
		}
		sum.Written = true
	}
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return fmt.Errorf("calendar %s: encode summary: %w", key, err)
	}
	if err := m.opts.Blobs.WriteBlob(ctx, sumName, "application/json", append(js, '\n')); err != nil {
		return fmt.Errorf("calendar %s: write %s: %w", key, sumName, err)
	}
	log.Info("merged", "feeds", len(feeds), "failed", len(failed), "events", sum.Events, "duplicates", sum.Duplicates)
	if len(failed) > 0 {
		return &FeedsError{Key: key, Total: len(feeds), Failed: failed}
	}
	return nil
}
