package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// demoDashboard is the web dashboard the demo serves in-process: its port
// is taken before anything starts, so its address can be printed first.
type demoDashboard struct {
	URL string
	// Token is an operator API token for the HTTP API served beside the
	// pages (set by Serve).
	Token string
	ln    net.Listener
	srv   *http.Server
	h     atomic.Pointer[http.Handler]
}

func newDemoDashboard(addr string) (*demoDashboard, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// Taken (another demo?): any free loopback port will do.
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	d := &demoDashboard{URL: "http://" + ln.Addr().String() + "/", ln: ln}
	d.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := d.h.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "2")
		http.Error(w, "the demo fleet is starting; reload in a few seconds", http.StatusServiceUnavailable)
	})}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			say("dashboard stopped: %v", err)
		}
	}()
	return d, nil
}

// Serve switches the dashboard to the fleet's account.
func (d *demoDashboard) Serve(f *fleet.Fleet) error {
	c, err := leasecron.NewClient(leasecron.ClientOptions{
		Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
	})
	if err != nil {
		return err
	}
	// The HTTP API beside the pages, with a token made for the demo.
	apiHandler, err := api.New(c, api.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.RevokeToken(ctx, "demo") // a demo run before on the same account
	if _, d.Token, err = c.CreateToken(ctx, "demo", leasecron.RoleOperator, nil, "make demo"); err != nil {
		return err
	}
	srv, err := dashboard.New(c, dashboard.Options{Version: "demo", API: apiHandler})
	if err != nil {
		return err
	}
	var h http.Handler = srv
	d.h.Store(&h)
	return nil
}

// Close stops serving.
func (d *demoDashboard) Close() { _ = d.srv.Close() }
