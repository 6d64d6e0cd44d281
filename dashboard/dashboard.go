// Package dashboard is leasecron's web dashboard: server-rendered pages
// (html/template) for the overview, pending tasks, recurring series, run
// history, dead letters, the blackboard and the fleet, each with a JSON
// twin under /api/, and the actions of the CLI behind POST forms with a
// CSRF token. Everything it serves is embedded; the one script refreshes
// the live parts of a page by polling the page itself.
//
// Reads go through a short server-side cache shared by every viewer, so
// live refresh costs a bounded number of storage requests per minute
// whatever the number of viewers; actions clear it.
package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Defaults.
const (
	// DefaultAddr is where `leasecron dashboard` listens unless told.
	DefaultAddr = "127.0.0.1:8090"
	// DefaultRefresh is how often an open page refreshes its live parts.
	DefaultRefresh = 10 * time.Second
	// DefaultCacheTTL is how long a read is shared between viewers.
	DefaultCacheTTL = 5 * time.Second
	// PageSize is the rows per page of the paged lists.
	PageSize = 50
	// PayloadPreview is the most payload, error or output text shown, in
	// bytes.
	PayloadPreview = 4 << 10
	// DeadLetterPreview is how many dead letters the page shows (the
	// service's peek limit).
	DeadLetterPreview = 32
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the dashboard. Zero values take the defaults.
type Options struct {
	// Auth is "" (none), "basic:USER:PASSWORD" or "bearer:TOKEN". With a
	// bearer token a browser signs in with basic auth, any user name and
	// the token as the password.
	Auth string
	// ViewerAuth is a second sign-in, in the same forms, for viewers: they
	// see every page, but the action buttons are absent and every POST is
	// refused (dashboard.viewer_auth). Auth's users are operators.
	ViewerAuth string
	// PlatformAuth trusts the sign-in of the platform in front of the
	// dashboard — Azure Container Apps' (or App Service's) built-in
	// authentication, which sets X-MS-CLIENT-PRINCIPAL-NAME and
	// X-MS-CLIENT-PRINCIPAL on every request it lets through and strips
	// them from what clients send (dashboard.platform_auth). Set it only
	// when every request reaches the dashboard through that platform: a
	// client that can reach it directly could name itself. Principals
	// with the app role OperatorRole are operators, the rest viewers.
	PlatformAuth bool
	// OperatorRole is the app role that makes a platform-signed-in
	// principal an operator (dashboard.operator_role). Default
	// DefaultOperatorRole ("leasecron.operator").
	OperatorRole string
	// ReadOnly hides every action and refuses every POST.
	ReadOnly bool
	// AllowAnonymous permits a read-only dashboard without Auth on a
	// non-loopback address (see CheckAddr).
	AllowAnonymous bool
	// Refresh is the live-refresh interval of open pages. Default 10 s.
	Refresh time.Duration
	// CacheTTL is how long one read is shared between viewers. Default
	// 5 s.
	CacheTTL time.Duration
	// Version is shown in the footer.
	Version string
	// Clock is the time source. Default the real clock.
	Clock leasecrontype.Clock
	// Logger receives action and error logs. Default slog.Default().
	Logger *slog.Logger
	// BasePath serves the dashboard under a path prefix, such as
	// "/leasecron" behind a reverse proxy that forwards /leasecron/... as
	// is (dashboard.base_path): every page, API route, action and link is
	// under it, and a request outside it gets 404. Default "" (the root).
	BasePath string
	// API, when set, answers every path under BasePath + "/api/v1/" (with
	// BasePath stripped) ahead of the dashboard's own sign-in: it
	// authenticates its own callers (the api package's handler, which
	// `leasecron dashboard` mounts here).
	API http.Handler
	// OnListen, when set, is called by Serve with the address it listens
	// on (useful with port 0).
	OnListen func(addr net.Addr)
	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// for the audit log's "from" (http.trusted_proxies), as
	// api.Options.TrustedProxies. Default none: the connection's peer.
	TrustedProxies []netip.Prefix
	// ProxyHops counts the reverse proxies in front (http.proxy_hops), as
	// api.Options.ProxyHops. Default 0.
	ProxyHops int
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Refresh = cmp.Or(o.Refresh, DefaultRefresh)
	o.BasePath = strings.TrimRight(o.BasePath, "/")
	o.CacheTTL = cmp.Or(o.CacheTTL, DefaultCacheTTL)
	o.OperatorRole = cmp.Or(o.OperatorRole, DefaultOperatorRole)
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	return opt.First(
		checkBasePath(o.BasePath),
		opt.AtLeast(ErrInvalidOptions, "dashboard.Options.Refresh", o.Refresh, DefaultRefresh, time.Second),
		opt.Positive(ErrInvalidOptions, "dashboard.Options.CacheTTL", o.CacheTTL, DefaultCacheTTL),
	)
}

// ErrExposed: the address is reachable from other machines and the
// dashboard is neither authenticated nor explicitly read-only and
// anonymous.
var ErrExposed = errors.New("dashboard would be exposed without authentication")

// ErrInvalidOptions is wrapped by errors about New's Options.
var ErrInvalidOptions = errors.New("invalid dashboard options")

// CheckAddr refuses a listen address that is not loopback unless auth is
// configured, or the dashboard is read-only with anonymous access allowed
// explicitly. "localhost" and loopback IPs are loopback; an empty host
// (":8090") listens on every interface.
func CheckAddr(addr string, o Options) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard address %q: %w: want host:port, e.g. %s", addr, err, DefaultAddr)
	}
	if isLoopback(host) || o.Auth != "" || o.ViewerAuth != "" || o.PlatformAuth || (o.ReadOnly && o.AllowAnonymous) {
		return nil
	}
	return fmt.Errorf("%w: address %q is not loopback: set dashboard.auth (basic:USER:PASSWORD or bearer:TOKEN) or dashboard.viewer_auth, or dashboard.platform_auth behind Container Apps authentication, or dashboard.read_only: true with dashboard.allow_anonymous: true, or listen on 127.0.0.1", ErrExposed, addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Server is the dashboard's http.Handler.
type Server struct {
	src  Source
	o    Options
	auth authenticator // operators
	// viewers sign in with Options.ViewerAuth.
	viewers authenticator
	csrf    *csrfKey
	cache   *cache
	tmpl    map[string]*template.Template
	static  http.Handler
	mux     *http.ServeMux
	log     *slog.Logger
}

// New returns the web dashboard over c as an http.Handler to mount
// anywhere (it serves /, /tasks, /runs, ..., /api/... and /static/). Every
// action goes through c, as the CLI's do. The handler applies Auth itself;
// exposing it safely is the caller's part: Serve refuses non-loopback
// addresses without Auth (see CheckAddr).
func New(c *leasecron.Client, o Options) (*Server, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", ErrInvalidOptions)
	}
	if o.Clock == nil {
		o.Clock = c.Clock()
	}
	return newServer(clientSource{c}, o)
}

// newServer builds the dashboard over any Source (the tests use a fake).
func newServer(src Source, o Options) (*Server, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.Logger = o.Logger.With("component", "dashboard")
	auth, err := parseAuth(o.Auth)
	if err != nil {
		return nil, err
	}
	viewers, err := parseAuth(o.ViewerAuth)
	if err != nil {
		return nil, fmt.Errorf("dashboard.viewer_auth: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	s := &Server{src: src, o: o, auth: auth, viewers: viewers, csrf: &csrfKey{key: key}, cache: newCache(o.Clock, o.CacheTTL), log: o.Logger}
	if s.tmpl, err = parseTemplates(o.BasePath); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	s.static = http.StripPrefix("/static/", staticFiles(http.FileServerFS(sub)))
	s.mux = s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler: security headers, authentication,
// then the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.o.API != nil && strings.HasPrefix(r.URL.Path, s.o.BasePath+"/api/v1/") {
		http.StripPrefix(s.o.BasePath, s.o.API).ServeHTTP(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
	id := s.identify(r)
	if id.role == roleNone {
		if s.auth.secret != nil || s.viewers.secret != nil {
			h.Set("WWW-Authenticate", `Basic realm="leasecron dashboard", charset="UTF-8"`)
		}
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	r = withIdentity(r, id)
	r, ok := s.underBase(w, r)
	if !ok {
		return
	}
	if s.noRoute(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Serve serves the dashboard over c on addr until ctx ends, then shuts
// down within 5 s. It refuses (ErrExposed) an address that is not loopback
// unless o.Auth is set, or o.ReadOnly and o.AllowAnonymous both are.
func Serve(ctx context.Context, addr string, c *leasecron.Client, o Options) error {
	if err := CheckAddr(addr, o); err != nil {
		return err
	}
	h, err := New(c, o)
	if err != nil {
		return err
	}
	return serve(ctx, addr, h, o.OnListen)
}

// serve listens on addr and serves h until ctx ends.
func serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	if ready != nil {
		ready(ln.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ForWorker returns, for leasecron.WorkerOptions.AdminHandler, a builder
// of the dashboard a worker serves on its admin address addr. It refuses
// an empty addr, an address other machines can reach without o.Auth
// (unless o.ReadOnly and o.AllowAnonymous both are), and a malformed Auth.
func ForWorker(addr string, o Options) (func(*leasecron.Client) (http.Handler, error), error) {
	if addr == "" {
		return nil, fmt.Errorf("%w: the dashboard needs the worker's AdminAddr (it is served there)", ErrInvalidOptions)
	}
	if err := ValidateAuth(o.Auth); err != nil {
		return nil, err
	}
	if err := ValidateAuth(o.ViewerAuth); err != nil {
		return nil, fmt.Errorf("dashboard.viewer_auth: %w", err)
	}
	if err := CheckAddr(addr, o); err != nil {
		return nil, fmt.Errorf("admin address: %w", err)
	}
	return func(c *leasecron.Client) (http.Handler, error) { return New(c, o) }, nil
}

// staticFiles answers 404 for a name no embedded file can have (the file
// server would report an invalid name as its own 500).
func staticFiles(files http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := strings.TrimPrefix(r.URL.Path, "/"); name != "" && !fs.ValidPath(name) {
			http.Error(w, fmt.Sprintf("no static file %q", name), http.StatusNotFound)
			return
		}
		files.ServeHTTP(w, r)
	})
}
