package dashboard

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/leasecron/leasecron/internal/trunc"
)

// ValidateBasePath checks the form of Options.BasePath
// (dashboard.base_path) without building a dashboard: empty, or
// "/name[/name...]" of letters, digits and - . _ ~ with no "." or ".."
// segment; trailing slashes are ignored.
func ValidateBasePath(p string) error {
	p = strings.TrimRight(p, "/")
	if p == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%q: %s; want a path prefix such as /leasecron (letters, digits and - . _ ~ in segments separated by /), or empty for the root", p, why)
	}
	if !strings.HasPrefix(p, "/") {
		return bad("it must start with /")
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return bad("it has an empty segment")
		case ".", "..":
			return bad("it has a " + seg + " segment")
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~", c)) {
				return bad(fmt.Sprintf("%q is not allowed", c))
			}
		}
	}
	return nil
}

func checkBasePath(p string) error {
	if err := ValidateBasePath(p); err != nil {
		return fmt.Errorf("%w: dashboard.base_path %w", ErrInvalidOptions, err)
	}
	return nil
}

// underBase returns r with the base path taken off its URL, as the routes
// know it. A request for the base path itself is sent on to the base
// path with a slash; one outside it is answered 404, naming where the
// dashboard is. ok is false when r has been answered.
func (s *Server) underBase(w http.ResponseWriter, r *http.Request) (_ *http.Request, ok bool) {
	base := s.o.BasePath
	if base == "" {
		return r, true
	}
	rest, under := strings.CutPrefix(r.URL.Path, base)
	switch {
	case under && rest == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		target := base + "/"
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return nil, false
	case !under || !strings.HasPrefix(rest, "/"):
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("no page %s: the dashboard is served under %s/ (dashboard.base_path)", trunc.Head(strconv.Quote(r.URL.Path), 200), base))
		return nil, false
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path = rest
	if raw, ok := strings.CutPrefix(u.RawPath, base); ok {
		u.RawPath = raw
	} else {
		u.RawPath = ""
	}
	r2.URL = &u
	return r2, true
}

// redirect sends the browser to a path of the dashboard (one the routes
// know, without the base path) after a form or a search.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, path string) {
	http.Redirect(w, r, s.o.BasePath+path, http.StatusSeeOther)
}
