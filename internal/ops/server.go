package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/opt"
)

// DefaultReadyTimeout bounds one readiness check.
const DefaultReadyTimeout = 3 * time.Second

// Options configure NewServer.
type Options struct {
	// Addr is the listen address, e.g. ":8080" or "127.0.0.1:9090" (port 0
	// picks a free port; see Server.Addr). Empty disables the server:
	// Start and Shutdown then do nothing.
	Addr string
	// Metrics is served at /metrics. Nil: /metrics answers 404.
	Metrics *Metrics
	// Ready reports whether the instance can do its work (e.g. ReadyCheck).
	// /readyz calls it with a ReadyTimeout deadline. Nil: always ready.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one call of Ready. Default DefaultReadyTimeout (3 s).
	ReadyTimeout time.Duration
	// Pprof serves the runtime profiles under /debug/pprof/. Off by default:
	// profiles reveal internals, so expose them only on a private address.
	Pprof bool
	// Logger receives start, stop and serve errors. Default slog.Default().
	Logger *slog.Logger
	// Fallback, when set, serves every path the admin routes do not (a
	// worker's dashboard).
	Fallback http.Handler
}

// Server is the admin HTTP server:
//
//	/healthz        200 "ok" while the process is alive
//	/readyz         200 "ok" when Options.Ready succeeds, else 503 and the reason
//	/metrics        Prometheus text format
//	/debug/pprof/*  runtime profiles, when Options.Pprof
type Server struct {
	opts    Options
	handler http.Handler

	mu       sync.Mutex
	srv      *http.Server
	ln       net.Listener
	served   chan struct{}
	shutdown bool
}

// ErrInvalidOptions is wrapped by NewServer's errors about its Options.
var ErrInvalidOptions = errors.New("invalid ops options")

// NewServer validates opts and builds the server; it does not listen yet.
func NewServer(opts Options) (*Server, error) {
	if opts.Addr != "" {
		if _, _, err := net.SplitHostPort(opts.Addr); err != nil {
			return nil, fmt.Errorf("ops: Options.Addr %q: %w: want host:port or :port, or empty to disable", opts.Addr, err)
		}
	}
	opts.ReadyTimeout = cmp.Or(opts.ReadyTimeout, DefaultReadyTimeout)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if err := opt.Positive(ErrInvalidOptions, "ops.Options.ReadyTimeout", opts.ReadyTimeout, DefaultReadyTimeout); err != nil {
		return nil, err
	}
	s := &Server{opts: opts}
	s.handler = s.routes()
	return s, nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.opts.Metrics.Handler())
	if s.opts.Fallback != nil {
		mux.Handle("/", s.opts.Fallback)
	}
	if s.opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// Handler returns the server's routes, for tests or for mounting in
// another server.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Options.Addr and serves in the background until ctx is
// done or Shutdown is called. It returns the listen error, if any. With an
// empty Addr it does nothing and returns nil.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Addr == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil || s.shutdown {
		return errors.New("ops: server already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("ops: admin server: listen on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
	}
	s.served = make(chan struct{})
	srv, served := s.srv, s.served
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.opts.Logger.Error("admin server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(sctx)
		case <-served:
		}
	}()
	s.opts.Logger.Info("admin server listening", "addr", ln.Addr().String(), "pprof", s.opts.Pprof)
	return nil
}

// Addr returns the address the server listens on ("" before Start or when
// disabled).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown stops the server gracefully, waiting for requests in flight
// until ctx is done. It is safe to call more than once and before Start.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	srv, served := s.srv, s.served
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-served
	return err
}
