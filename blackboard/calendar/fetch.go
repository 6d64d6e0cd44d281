package calendar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	ics "github.com/arran4/golang-ical"

	"github.com/leasecron/leasecron/internal/trunc"
)

// feed is one parsed feed; it is shared through the cache and never
// modified after parsing.
type feed struct {
	events    []*ics.VEvent
	timezones []*ics.VTimezone
}

// cacheEntry is what a conditional request needs: the validators of the
// last good response and its parsed content.
type cacheEntry struct {
	etag, lastModified string
	feed               *feed
}

// outcome is the result of fetching one feed.
type outcome struct {
	result FeedResult
	feed   *feed // nil on failure
	err    error
}

// fetchAll fetches feeds with bounded concurrency; outcomes keep the
// payload's order.
func (m *merger) fetchAll(ctx context.Context, feeds []string) []outcome {
	out := make([]outcome, len(feeds))
	sem := make(chan struct{}, m.opts.Concurrency)
	var wg sync.WaitGroup
	for i, u := range feeds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = m.fetch(ctx, u)
		}()
	}
	wg.Wait()
	return out
}

func (m *merger) cached(u string) *cacheEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cache[u]
}

func (m *merger) remember(u string, e *cacheEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache[u] = e
}

func (m *merger) fetch(ctx context.Context, u string) (o outcome) {
	start := m.opts.Clock.Now()
	o.result = FeedResult{URL: u}
	defer func() {
		o.result.DurationMS = m.opts.Clock.Now().Sub(start).Milliseconds()
		if o.err != nil {
			o.result.Status = StatusFailed
			o.result.Error = o.err.Error()
			o.feed = nil
		} else {
			o.result.Events = len(o.feed.events)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		o.err = fmt.Errorf("%w: %w", ErrFeedUnreachable, err)
		return o
	}
	req.Header.Set("User-Agent", m.opts.UserAgent)
	req.Header.Set("Accept", "text/calendar, text/plain;q=0.5, */*;q=0.1")
	prev := m.cached(u)
	if prev != nil {
		if prev.etag != "" {
			req.Header.Set("If-None-Match", prev.etag)
		}
		if prev.lastModified != "" {
			req.Header.Set("If-Modified-Since", prev.lastModified)
		}
	}
	resp, err := m.opts.HTTPClient.Do(req)
	if err != nil {
		o.err = fmt.Errorf("%w: %s", ErrFeedUnreachable, describeFetchError(ctx, err, m.opts.Timeout))
		return o
	}
	defer resp.Body.Close()
	o.result.HTTPStatus = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusNotModified && prev != nil:
		o.result.Status = StatusNotModified
		o.feed = prev.feed
		return o
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		o.err = fmt.Errorf("%w: HTTP %s", ErrFeedUnreachable, resp.Status)
		return o
	}
	limit := m.opts.MaxFeedSize
	if resp.ContentLength > limit {
		o.err = fmt.Errorf("%w: %d bytes announced, the limit is %d", ErrFeedTooLarge, resp.ContentLength, limit)
		return o
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	o.result.Bytes = int64(len(body))
	switch {
	case int64(len(body)) > limit:
		o.err = fmt.Errorf("%w: more than %d bytes", ErrFeedTooLarge, limit)
		return o
	case err != nil:
		o.err = fmt.Errorf("%w: reading the body: %s", ErrFeedUnreachable, describeFetchError(ctx, err, m.opts.Timeout))
		return o
	}
	f, err := parseFeed(body)
	if err != nil {
		o.err = err
		return o
	}
	o.result.Status = StatusOK
	o.feed = f
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if etag != "" || lastMod != "" {
		m.remember(u, &cacheEntry{etag: etag, lastModified: lastMod, feed: f})
	}
	return o
}

func describeFetchError(ctx context.Context, err error, timeout time.Duration) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("timed out after %v", timeout)
	}
	return err.Error()
}

// parseFeed checks and parses one feed body.
func parseFeed(body []byte) (*feed, error) {
	b := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: no content", ErrFeedEmpty)
	}
	first, _, _ := strings.Cut(string(trimmed[:min(len(trimmed), 200)]), "\n")
	if !strings.EqualFold(strings.TrimSpace(first), "BEGIN:VCALENDAR") {
		return nil, fmt.Errorf("%w: not an iCalendar stream (starts with %q)", ErrFeedMalformed, trunc.Head(strings.TrimSpace(first), 40))
	}
	lastNL := bytes.LastIndexByte(trimmed, '\n')
	if last := strings.TrimSpace(string(trimmed[lastNL+1:])); !strings.EqualFold(last, "END:VCALENDAR") {
		return nil, fmt.Errorf("%w: truncated (does not end with END:VCALENDAR)", ErrFeedMalformed)
	}
	cal, err := ics.ParseCalendar(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFeedMalformed, err)
	}
	f := &feed{timezones: cal.Timezones()}
	for _, ev := range cal.Events() {
		splitListProperties(ev)
		f.events = append(f.events, ev)
	}
	return f, nil
}

// splitListProperties rewrites CATEGORIES:a,b as CATEGORIES:a and
// CATEGORIES:b (same meaning, RFC 5545 §3.8.1.2), because the library
// unescapes commas on reading and escapes them on writing, which would turn
// a list into one value.
func splitListProperties(ev *ics.VEvent) {
	var props []ics.IANAProperty
	changed := false
	for _, p := range ev.Properties {
		if (p.IANAToken == string(ics.ComponentPropertyCategories) || p.IANAToken == string(ics.ComponentPropertyResources)) &&
			strings.Contains(p.Value, ",") {
			changed = true
			for _, v := range strings.Split(p.Value, ",") {
				if v = strings.TrimSpace(v); v != "" {
					q := p
					q.Value = v
					props = append(props, q)
				}
			}
			continue
		}
		props = append(props, p)
	}
	if changed {
		ev.Properties = props
	}
}
