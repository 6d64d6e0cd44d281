package leasecron

import (
	"context"
	"time"

	"github.com/leasecron/leasecron/internal/apitoken"
)

// The roles of an API token (APIToken.Role): a viewer reads, a scheduler
// schedules, cancels and reads its tasks, an operator does everything
// (see the api package).
const (
	RoleViewer    = apitoken.RoleViewer
	RoleScheduler = apitoken.RoleScheduler
	RoleOperator  = apitoken.RoleOperator
)

// Errors of the API token calls.
var (
	// ErrNoToken: no API token of that name (errors.Is ErrNotFound too).
	ErrNoToken = apitoken.ErrNotFound
	// ErrTokenExists: CreateToken found the name taken.
	ErrTokenExists = apitoken.ErrExists
	// ErrInvalidToken wraps a bad token name, role or type list.
	ErrInvalidToken = apitoken.ErrInvalid
	// ErrUnauthorized: VerifyToken was given a malformed, unknown or
	// revoked token.
	ErrUnauthorized = apitoken.ErrUnauthorized
)

// APIToken is an API token as stored, without its secret (only the
// secret's SHA-256 is kept, in the container's control/tokens/NAME.json).
type APIToken struct {
	// Name names the token in the audit log ("token:NAME").
	Name string `json:"name"`
	// Role is RoleViewer, RoleScheduler or RoleOperator.
	Role string `json:"role"`
	// Types, when not empty, are the only task types the token may touch.
	Types []string `json:"types,omitempty"`
	// Created is when it was made, and By by whom.
	Created time.Time `json:"created"`
	By      string    `json:"by,omitempty"`
}

// AllowsType reports whether the token may touch tasks of type typ.
func (t APIToken) AllowsType(typ string) bool { return apitoken.Token{Types: t.Types}.Allows(typ) }

func apiTokenOf(t apitoken.Token) APIToken {
	return APIToken{Name: t.Name, Role: t.Role, Types: t.Types, Created: t.Created, By: t.By}
}

// ValidateToken checks a token's name, role and types as CreateToken
// does, without contacting storage (ErrInvalidToken names what is wrong).
func ValidateToken(name, role string, types []string) error { return apitoken.Check(name, role, types) }

// CreateToken makes an API token called name (1–63 of a-z, 0-9 and -)
// with role (RoleViewer, RoleScheduler or RoleOperator), limited to types
// when given, and returns it with the token string lct.NAME.SECRET. The
// string is shown once: only its hash is stored. One request.
func (c *Client) CreateToken(ctx context.Context, name, role string, types []string, by string) (APIToken, string, error) {
	t, secret, err := c.tokens.Create(ctx, name, role, types, by)
	return apiTokenOf(t), secret, err
}

// Tokens lists the API tokens, by name (one request, and one per token).
func (c *Client) Tokens(ctx context.Context) ([]APIToken, error) {
	ts, err := c.tokens.List(ctx)
	out := make([]APIToken, len(ts))
	for i, t := range ts {
		out[i] = apiTokenOf(t)
	}
	return out, err
}

// RevokeToken deletes the API token called name (ErrNoToken when there is
// none). Servers that cached it stop accepting it within their cache time
// (api.TokenCacheTTL).
func (c *Client) RevokeToken(ctx context.Context, name string) error {
	return c.tokens.Revoke(ctx, name)
}

// VerifyToken returns the API token a full token string names, or
// ErrUnauthorized when it is malformed, unknown, revoked or its secret does
// not match. One request.
func (c *Client) VerifyToken(ctx context.Context, token string) (APIToken, error) {
	t, err := c.tokens.Verify(ctx, token)
	return apiTokenOf(t), err
}
