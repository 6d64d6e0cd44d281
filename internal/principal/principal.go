// Package principal reads the sign-in of Azure Container Apps' and App
// Service's built-in authentication: the headers it sets on every request
// it lets through (and strips from what clients send).
package principal

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// The headers the platform sets.
const (
	// HeaderName carries the signed-in principal's name.
	HeaderName = "X-MS-CLIENT-PRINCIPAL-NAME"
	// Header carries the principal and its claims, base64 JSON.
	Header = "X-MS-CLIENT-PRINCIPAL"
)

// HasRole reports whether the base64 JSON client principal lists role
// among its role claims (claims of its role_typ, or "roles"/"role").
func HasRole(principal, role string) bool {
	if principal == "" || role == "" {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(principal)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(principal); err != nil {
			return false
		}
	}
	var p struct {
		RoleTyp string `json:"role_typ"`
		Claims  []struct {
			Typ string `json:"typ"`
			Val string `json:"val"`
		} `json:"claims"`
	}
	if json.Unmarshal(b, &p) != nil {
		return false
	}
	for _, c := range p.Claims {
		if (c.Typ == p.RoleTyp && p.RoleTyp != "" || strings.EqualFold(c.Typ, "roles") || strings.EqualFold(c.Typ, "role")) && c.Val == role {
			return true
		}
	}
	return false
}
