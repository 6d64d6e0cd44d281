// Package api is leasecron's HTTP API for programs: JSON under /api/v1,
// described by the OpenAPI 3.1 document it serves at
// /api/v1/openapi.json (the file openapi.json of this package). Every
// route but the document needs an API token (Client.CreateToken, `leasecron
// tokens create`) as a bearer token, or the platform's sign-in (Azure
// Container Apps or App Service built-in authentication) when
// Options.PlatformAuth is set; the token's role and types decide what it
// may do. Errors are RFC 9457 problem details. Every call that changes
// something is written to the audit log. See docs/api.md.
//
// `leasecron dashboard` serves it beside the pages, and a worker on its
// admin address with admin.api: true; a program mounts New's handler
// anywhere (it answers paths under /api/v1/).
package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/principal"
	"github.com/leasecron/leasecron/leasecrontype"
)

// reservedPrefix starts leasecron's own task types, which callers may not
// schedule or touch.
const reservedPrefix = "leasecron-"

// Prefix is the path every route of the API starts with.
const Prefix = "/api/v1/"

// Defaults of Options.
const (
	// DefaultMaxBody is the largest request body accepted, in bytes.
	DefaultMaxBody = 8 << 20
	// DefaultMaxTasks is the most tasks one schedule-many request takes.
	DefaultMaxTasks = 1000
	// DefaultTokenCacheTTL is how long a checked token is trusted before
	// it is read again: a revoked token fails within it.
	DefaultTokenCacheTTL = 10 * time.Second
)

// The platform app roles mapped to the API's roles (Options.PlatformAuth).
const (
	PlatformOperatorRole  = "leasecron.operator"
	PlatformSchedulerRole = "leasecron.scheduler"
	PlatformViewerRole    = "leasecron.viewer"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the API (JSON).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// Routes returns "METHOD /path" of every route the server serves, the
// document (GET /api/v1/openapi.json) aside.
func Routes() []string {
	var out []string
	for _, r := range (&server{}).table() {
		out = append(out, r.pattern)
	}
	return out
}

// ErrInvalidOptions is wrapped by New's errors about its Options.
var ErrInvalidOptions = errors.New("invalid API options")

// Options configure the API. Zero values take the defaults.
type Options struct {
	// PlatformAuth trusts the sign-in of Azure Container Apps or App
	// Service built-in authentication (headers X-MS-CLIENT-PRINCIPAL-NAME
	// and X-MS-CLIENT-PRINCIPAL): a principal with the app role
	// PlatformOperatorRole is an operator, PlatformSchedulerRole a
	// scheduler, PlatformViewerRole a viewer (none: 403). Set it only
	// when every request comes through that platform (api.platform_auth).
	PlatformAuth bool
	// MaxBody is the largest request body accepted (api.max_body).
	// Default DefaultMaxBody.
	MaxBody int64
	// MaxTasks is the most tasks of one schedule-many request
	// (api.max_tasks). Default DefaultMaxTasks.
	MaxTasks int
	// TokenCacheTTL is how long a checked token is trusted. Default
	// DefaultTokenCacheTTL.
	TokenCacheTTL time.Duration
	// Clock is the time source. Default the client's.
	Clock leasecrontype.Clock
	// Logger receives error logs. Default slog.Default().
	Logger *slog.Logger
	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// for the audit log's "from" (http.trusted_proxies): a request whose
	// connection comes from one of them is from the last address the
	// header names that is not itself trusted. Default none: the
	// connection's peer.
	TrustedProxies []netip.Prefix
	// ProxyHops is how many reverse proxies in front each append to
	// X-Forwarded-For (http.proxy_hops): the audit log's "from" is the
	// entry that many from the header's end — for a server no request
	// reaches but through them (Azure Container Apps ingress: 1). With
	// TrustedProxies too, only for requests whose peer is one of them.
	// Default 0.
	ProxyHops int
}

// roles a route allows, as bits.
type roles uint8

const (
	viewer roles = 1 << iota
	scheduler
	operator
	anyRole = viewer | scheduler | operator
)

func roleBit(name string) roles {
	switch name {
	case leasecron.RoleViewer:
		return viewer
	case leasecron.RoleScheduler:
		return scheduler
	case leasecron.RoleOperator:
		return operator
	}
	return 0
}

// caller is who made a request.
type caller struct {
	who   string
	role  roles
	types []string // empty: every type
}

func (c caller) allows(typ string) bool {
	return leasecron.APIToken{Types: c.types}.AllowsType(typ)
}

// limited reports whether the caller is limited to some types.
func (c caller) limited() bool { return len(c.types) > 0 }

// server is the API's http.Handler.
type server struct {
	c   *leasecron.Client
	o   Options
	clk clock.Clock
	log *slog.Logger
	mux *http.ServeMux

	mu     sync.Mutex
	tokens map[[32]byte]cached
	// calls counts the calls audited in bulk (reads, refusals).
	calls callLog
}

// cached is a token check remembered until until.
type cached struct {
	tok   leasecron.APIToken
	ok    bool
	until time.Time
}

// New returns the API over c as an http.Handler answering paths under
// Prefix (mount it at the root of a server, or under a path prefix with
// http.StripPrefix).
func New(c *leasecron.Client, o Options) (http.Handler, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", ErrInvalidOptions)
	}
	if o.MaxBody < 0 || o.MaxTasks < 0 || o.TokenCacheTTL < 0 {
		return nil, fmt.Errorf("%w: max_body %d, max_tasks %d, token cache %s: want 0 (the default) or more", ErrInvalidOptions, o.MaxBody, o.MaxTasks, o.TokenCacheTTL)
	}
	o.MaxBody = cmp.Or(o.MaxBody, DefaultMaxBody)
	o.MaxTasks = cmp.Or(o.MaxTasks, DefaultMaxTasks)
	o.TokenCacheTTL = cmp.Or(o.TokenCacheTTL, DefaultTokenCacheTTL)
	if o.Clock == nil {
		o.Clock = c.Clock()
	}
	s := &server{c: c, o: o, clk: clock.OrReal(o.Clock), log: cmp.Or(o.Logger, slog.Default()).With("component", "api"), tokens: map[[32]byte]cached{}}
	s.mux = s.routes()
	// Browsers' cross-origin writes are refused (Sec-Fetch-Site, Origin):
	// with platform sign-in a signed-in browser carries credentials.
	// Programs send neither header and pass.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem(http.StatusForbidden, "forbidden", "a cross-origin request from a browser: the API is for programs"))
	}))
	return cop.Handler(s), nil
}

// ServeHTTP authenticates the request, then routes it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == Prefix+"openapi.json" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
		return
	}
	handler, pattern := s.mux.Handler(r)
	if pattern == "" {
		// The mux's own 404 or 405, as a problem.
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		if rec.Code == http.StatusMethodNotAllowed {
			h.Set("Allow", rec.Header().Get("Allow"))
			writeProblem(w, r, problem(http.StatusMethodNotAllowed, "method-not-allowed", fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, rec.Header().Get("Allow"))))
			return
		}
		writeProblem(w, r, problem(http.StatusNotFound, "not-found", fmt.Sprintf("no route %s %s: see %sopenapi.json", r.Method, r.URL.Path, Prefix)))
		return
	}
	who, p := s.identify(r)
	if p != nil {
		name := who.who
		if name == "" {
			name = "unauthenticated"
		}
		s.count(name, "refused", pattern)
		if p.Status == http.StatusUnauthorized {
			h.Set("WWW-Authenticate", `Bearer realm="leasecron"`)
		}
		writeProblem(w, r, p)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
}

type callerKey struct{}

func callerOf(r *http.Request) caller { c, _ := r.Context().Value(callerKey{}).(caller); return c }

// identify finds who signed r in: the platform's principal (with
// PlatformAuth), else the bearer token.
func (s *server) identify(r *http.Request) (caller, *Problem) {
	if s.o.PlatformAuth {
		if name := r.Header.Get(principal.HeaderName); name != "" {
			p := r.Header.Get(principal.Header)
			c := caller{who: "principal:" + name}
			switch {
			case principal.HasRole(p, PlatformOperatorRole):
				c.role = operator
			case principal.HasRole(p, PlatformSchedulerRole):
				c.role = scheduler
			case principal.HasRole(p, PlatformViewerRole):
				c.role = viewer
			default:
				return caller{}, problem(http.StatusForbidden, "forbidden", fmt.Sprintf("principal %q holds none of the app roles %s, %s, %s", name, PlatformOperatorRole, PlatformSchedulerRole, PlatformViewerRole))
			}
			return c, nil
		}
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return caller{}, problem(http.StatusUnauthorized, "unauthorized", "no API token: send Authorization: Bearer lct.NAME.SECRET (leasecron tokens create NAME --role ROLE)")
	}
	t, err := s.verify(r.Context(), token)
	if errors.Is(err, leasecron.ErrUnauthorized) {
		return caller{}, problem(http.StatusUnauthorized, "unauthorized", "the API token is malformed, unknown or revoked")
	} else if err != nil {
		s.log.Warn("checking an api token failed", "err", err)
		p := problem(http.StatusServiceUnavailable, "unavailable", "the API token could not be checked: storage is unavailable; retry after the time in Retry-After")
		p.retryAfter = 1
		return caller{}, p
	}
	return caller{who: "token:" + t.Name, role: roleBit(t.Role), types: t.Types}, nil
}

// verify checks token, at most once per TokenCacheTTL.
func (s *server) verify(ctx context.Context, token string) (leasecron.APIToken, error) {
	key := sha256.Sum256([]byte(token))
	now := s.clk.Now()
	s.mu.Lock()
	c, ok := s.tokens[key]
	s.mu.Unlock()
	if ok && now.Before(c.until) {
		if !c.ok {
			return leasecron.APIToken{}, leasecron.ErrUnauthorized
		}
		return c.tok, nil
	}
	t, err := s.c.VerifyToken(ctx, token)
	if err != nil && !errors.Is(err, leasecron.ErrUnauthorized) {
		return t, err // storage: not remembered
	}
	s.mu.Lock()
	if len(s.tokens) >= 10000 {
		// Bounded: wrong tokens cannot grow it for ever, nor push the
		// good ones out.
		for k, v := range s.tokens {
			if !v.ok || !now.Before(v.until) {
				delete(s.tokens, k)
			}
		}
		if len(s.tokens) >= 10000 {
			clear(s.tokens)
		}
	}
	s.tokens[key] = cached{tok: t, ok: err == nil, until: now.Add(s.o.TokenCacheTTL)}
	s.mu.Unlock()
	return t, err
}

// withTrace returns ctx carrying the caller's traceparent header, so that
// the tasks scheduled are children of its span.
func withTrace(r *http.Request) context.Context {
	return propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
