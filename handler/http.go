package handler

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// DefaultHTTPTimeout bounds one request of an HTTP handler.
const DefaultHTTPTimeout = 30 * time.Second

// maxDrain bounds how much of a response body is read (its tail kept).
const maxDrain = 1 << 20

// Request headers an HTTP handler sends with every task. They mirror the
// environment variables of Exec; a traced task's request also carries the
// W3C traceparent (and tracestate) header of the worker's span for the run.
const (
	HeaderTaskID     = "X-Leasecron-Task-Id"
	HeaderTaskType   = "X-Leasecron-Task-Type"
	HeaderSeries     = "X-Leasecron-Series" // only when set
	HeaderAttempt    = "X-Leasecron-Attempt"
	HeaderDue        = "X-Leasecron-Due" // RFC 3339, UTC
	HeaderGeneration = "X-Leasecron-Generation"
	HeaderKey        = "X-Leasecron-Key" // only when set
	// HeaderBatch and HeaderBatchCounts mirror EnvBatch and EnvBatchCounts.
	HeaderBatch       = "X-Leasecron-Batch"
	HeaderBatchCounts = "X-Leasecron-Batch-Counts"
)

// HTTPOptions configure HTTP. URL is required; every other field has a
// default.
type HTTPOptions struct {
	// URL is the endpoint, http or https.
	URL string
	// Method is the request method. Default POST.
	Method string
	// Headers are added to every request. Content-Type defaults to
	// application/octet-stream; the X-Leasecron-* headers are set by the
	// handler and cannot be overridden.
	Headers map[string]string
	// Timeout bounds one request, body included. Default
	// DefaultHTTPTimeout (30 s).
	Timeout time.Duration
	// Client sends the requests. Default: a new http.Client with default
	// transport settings.
	Client *http.Client
	// OutputTail is how many bytes of the response body are kept. Default
	// DefaultOutputTail (4 KiB).
	OutputTail int
	// Logger receives one debug line per request. Default slog.Default().
	Logger *slog.Logger
}

// HTTPError is the error of a request answered with a non-2xx status.
type HTTPError struct {
	// Method and URL of the request (URL with secrets redacted).
	Method, URL string
	// StatusCode is the response status.
	StatusCode int
	// Tail is the end of the response body.
	Tail string
}

// Error reports the status and up to 1 KiB of the body's tail.
func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("http %s %s: status %d %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if t := strings.TrimSpace(e.Tail); t != "" {
		if len(t) > errorTailMax {
			t = strings.ToValidUTF8("…"+t[len(t)-errorTailMax:], "")
		}
		msg += ": " + t
	}
	return msg
}

type httpHandler struct {
	HTTPOptions
	safeURL string
}

// HTTP returns a handler that sends the task's payload as the body of a
// request to opts.URL, with the X-Leasecron-* headers describing the task.
// A 2xx response is success; 503 with a Retry-After header snoozes the
// task for that long (leasecrontype.Snooze); any other status returns an
// *HTTPError with the status and the tail of the body; a request that
// exceeds opts.Timeout returns an error wrapping ErrTimeout.
//
// HTTP validates opts and returns an error wrapping ErrInvalidOptions that
// names the bad field when they are unusable.
func HTTP(opts HTTPOptions) (leasecrontype.Handler, error) {
	h := &httpHandler{HTTPOptions: opts.WithDefaults()}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return h.run, nil
}

// WithDefaults returns o with every zero field set to its default.
func (o HTTPOptions) WithDefaults() HTTPOptions {
	o.Method = cmp.Or(o.Method, http.MethodPost)
	o.Timeout = cmp.Or(o.Timeout, DefaultHTTPTimeout)
	o.OutputTail = cmp.Or(o.OutputTail, DefaultOutputTail)
	o.Client = cmp.Or(o.Client, &http.Client{})
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

// validate refuses unusable options and settles what they imply (the
// program's path, private copies of slices and maps).
func (h *httpHandler) validate() error {
	if h.URL == "" {
		return fmt.Errorf("%w: HTTPOptions.URL is empty: want an http:// or https:// URL", ErrInvalidOptions)
	}
	u, err := url.Parse(h.URL)
	if err != nil {
		return fmt.Errorf("%w: HTTPOptions.URL %q: %w", ErrInvalidOptions, storage.Redact(h.URL), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: HTTPOptions.URL %q has scheme %q: want http or https", ErrInvalidOptions, storage.Redact(h.URL), u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: HTTPOptions.URL %q has no host", ErrInvalidOptions, storage.Redact(h.URL))
	}
	h.safeURL = storage.Redact(u.Redacted())
	if !validToken(h.Method) {
		return fmt.Errorf("%w: HTTPOptions.Method %q is not a valid HTTP method", ErrInvalidOptions, h.Method)
	}
	hdr := make(map[string]string, len(h.Headers))
	for k, v := range h.Headers {
		if !validToken(k) {
			return fmt.Errorf("%w: HTTPOptions.Headers: %q is not a valid header name", ErrInvalidOptions, k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("%w: HTTPOptions.Headers[%q]: value contains a line break or NUL", ErrInvalidOptions, k)
		}
		hdr[k] = v
	}
	h.Headers = hdr
	if err := opt.First(
		opt.Positive(ErrInvalidOptions, "HTTPOptions.Timeout", h.Timeout, DefaultHTTPTimeout),
		opt.Positive(ErrInvalidOptions, "HTTPOptions.OutputTail", h.OutputTail, DefaultOutputTail),
	); err != nil {
		return err
	}
	h.Logger = h.Logger.With("component", "handler", "kind", "http")
	return nil
}

// validToken reports whether s is a non-empty RFC 9110 token (method and
// header-name syntax).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func (h *httpHandler) run(ctx context.Context, t leasecrontype.Task) error {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, h.Timeout, ErrTimeout)
	defer cancel()

	req, err := http.NewRequestWithContext(withProgressHeaders(ctx, h.Logger, t.ID), h.Method, h.URL, bytes.NewReader(t.Payload))
	if err != nil {
		return fmt.Errorf("http %s %s: %w", h.Method, h.safeURL, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(HeaderTaskID, t.ID)
	req.Header.Set(HeaderTaskType, t.Type)
	req.Header.Set(HeaderAttempt, strconv.Itoa(t.Attempt))
	req.Header.Set(HeaderGeneration, strconv.FormatInt(t.Generation, 10))
	if !t.Due.IsZero() {
		req.Header.Set(HeaderDue, t.Due.UTC().Format(time.RFC3339Nano))
	}
	if t.Series != "" {
		req.Header.Set(HeaderSeries, t.Series)
	}
	if t.Key != "" {
		req.Header.Set(HeaderKey, t.Key)
	}
	if batch, counts := batchVars(t); batch != "" {
		req.Header.Set(HeaderBatch, batch)
		if counts != "" {
			req.Header.Set(HeaderBatchCounts, counts)
		}
	}
	// W3C trace context of the worker's span for the run, when traced.
	tracing.Inject(ctx, req.Header)

	resp, err := h.Client.Do(req)
	if err != nil {
		return h.requestError(ctx, err)
	}
	defer resp.Body.Close()
	body := trunc.NewWriter(h.OutputTail)
	_, rerr := io.Copy(body, io.LimitReader(resp.Body, maxDrain))
	tail := body.String()
	recordOutput(ctx, tail)
	if resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			h.Logger.Debug("snoozed", "url", h.safeURL, "task_id", t.ID, "for", d)
			return leasecrontype.Snooze(d)
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		h.Logger.Debug("failed", "url", h.safeURL, "task_id", t.ID, "status", resp.StatusCode, "elapsed", time.Since(start))
		return &HTTPError{Method: h.Method, URL: h.safeURL, StatusCode: resp.StatusCode, Tail: tail}
	}
	if rerr != nil {
		// The endpoint said yes; a body cut short by the timeout does not
		// change that.
		h.Logger.Debug("response body not fully read", "url", h.safeURL, "task_id", t.ID, "err", rerr)
	}
	h.Logger.Debug("done", "url", h.safeURL, "task_id", t.ID, "status", resp.StatusCode, "elapsed", time.Since(start))
	return nil
}

func (h *httpHandler) requestError(ctx context.Context, err error) error {
	// The client's error repeats the URL unredacted; keep only its cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
			return fmt.Errorf("http %s %s: %w after %v", h.Method, h.safeURL, ErrTimeout, h.Timeout)
		}
		return fmt.Errorf("http %s %s: cancelled: %w", h.Method, h.safeURL, context.Cause(ctx))
	}
	return fmt.Errorf("http %s %s: %w", h.Method, h.safeURL, err)
}

// retryAfter parses a Retry-After header: a number of seconds or an HTTP
// date (a date in the past means now).
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
