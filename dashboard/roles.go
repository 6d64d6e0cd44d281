package dashboard

import (
	"context"
	"net/http"

	"github.com/leasecron/leasecron/internal/principal"
)

// Roles: an operator sees and acts; a viewer sees only (the action buttons
// are absent and every POST is refused). Who is which comes from how the
// request signed in: Options.Auth makes operators, Options.ViewerAuth
// viewers, and with Options.PlatformAuth the platform's sign-in (Azure
// Container Apps or App Service built-in authentication) makes operators
// of the principals holding Options.OperatorRole and viewers of the rest.
type role int

const (
	roleNone role = iota // not signed in
	roleViewer
	roleOperator
)

// identity is who a request signed in as.
type identity struct {
	who  string
	role role
}

type identityKey struct{}

// identityOf returns the identity ServeHTTP found for r.
func identityOf(r *http.Request) identity {
	id, _ := r.Context().Value(identityKey{}).(identity)
	return id
}

// The headers the platform's built-in authentication sets on every
// request it lets through (and strips from what clients send).
const (
	headerPrincipalName = principal.HeaderName
	headerPrincipal     = principal.Header
)

// DefaultOperatorRole is the app role that makes a platform-authenticated
// principal an operator (Options.OperatorRole).
const DefaultOperatorRole = "leasecron.operator"

// identify finds who r signed in as, in order: the platform's headers
// (only with PlatformAuth), the operators' credentials, the viewers'. A
// dashboard with no sign-in configured treats every request as an
// anonymous operator (CheckAddr keeps it to loopback), or as an anonymous
// viewer when it is read-only.
func (s *Server) identify(r *http.Request) identity {
	if s.o.PlatformAuth {
		if name := r.Header.Get(headerPrincipalName); name != "" {
			id := identity{who: name, role: roleViewer}
			if principal.HasRole(r.Header.Get(headerPrincipal), s.o.OperatorRole) {
				id.role = roleOperator
			}
			return id
		}
	}
	if s.auth.secret != nil && s.auth.ok(r) {
		return identity{who: s.auth.who(r), role: roleOperator}
	}
	if s.viewers.secret != nil && s.viewers.ok(r) {
		return identity{who: s.viewers.who(r), role: roleViewer}
	}
	if s.auth.secret == nil && s.viewers.secret == nil && !s.o.PlatformAuth {
		return identity{who: "anonymous", role: roleOperator}
	}
	return identity{}
}

// withIdentity returns r carrying id.
func withIdentity(r *http.Request, id identity) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id))
}

// canAct reports whether r may change anything: an operator of a
// dashboard that is not read-only.
func (s *Server) canAct(r *http.Request) bool {
	return !s.o.ReadOnly && identityOf(r).role == roleOperator
}
