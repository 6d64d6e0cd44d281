package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// authenticator checks a request's credentials; the zero value lets every
// request through.
type authenticator struct {
	user, secret []byte // secret: the password or the bearer token
	bearer       bool
}

// ValidateAuth checks the form of Options.Auth (dashboard.auth) without
// echoing it.
func ValidateAuth(s string) error {
	_, err := parseAuth(s)
	return err
}

// parseAuth reads Options.Auth. The error names the accepted forms but
// never echoes the value (it is a secret).
func parseAuth(s string) (authenticator, error) {
	if s == "" {
		return authenticator{}, nil
	}
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case "basic":
		user, pass, ok := strings.Cut(rest, ":")
		if ok && user != "" && pass != "" {
			return authenticator{user: []byte(user), secret: []byte(pass)}, nil
		}
	case "bearer":
		if rest != "" {
			return authenticator{secret: []byte(rest), bearer: true}, nil
		}
	}
	return authenticator{}, fmt.Errorf("dashboard.auth (value not shown): want basic:USER:PASSWORD or bearer:TOKEN, each part non-empty")
}

// equal compares two secrets in constant time (hashing first, so that not
// even their lengths leak through timing).
func equal(a, b []byte) bool {
	ha, hb := sha256.Sum256(a), sha256.Sum256(b)
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// who names who signed in with r, for the audit log: the basic-auth
// user, "token" for the bearer token, "anonymous" without sign-in.
func (a authenticator) who(r *http.Request) string {
	switch {
	case a.secret == nil:
		return "anonymous"
	case a.bearer:
		return "token"
	}
	u, _, _ := r.BasicAuth()
	return u
}

func (a authenticator) ok(r *http.Request) bool {
	if a.secret == nil {
		return true
	}
	h := r.Header.Get("Authorization")
	if tok, found := strings.CutPrefix(h, "Bearer "); found && a.bearer {
		return equal([]byte(tok), a.secret)
	}
	user, pass, found := r.BasicAuth()
	if !found {
		return false
	}
	if a.bearer {
		// Browsers cannot send a bearer token: the token is accepted as
		// a basic-auth password with any user name.
		return equal([]byte(pass), a.secret)
	}
	// Both compared, always, so a wrong user name takes as long as a
	// wrong password.
	u, p := equal([]byte(user), a.user), equal([]byte(pass), a.secret)
	return u && p
}

// CSRF: a random per-browser cookie, and a token that is the HMAC of that
// cookie under a per-process key. A state-changing request must carry the
// token (form field csrf or header X-CSRF-Token) matching its cookie.
// Cross-origin browser requests are refused before that by
// http.CrossOriginProtection (Sec-Fetch-Site / Origin).
const (
	csrfCookie = "leasecron_csrf"
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

type csrfKey struct{ key []byte }

func (k *csrfKey) sign(v string) string {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// token returns the CSRF token for r, setting the cookie when r has none.
func (k *csrfKey) token(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return k.sign(c.Value)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	// Later reads of the same request (the page's forms) see it too.
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	return k.sign(v)
}

// check reports whether r carries a valid token for its cookie.
func (k *csrfKey) check(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) < 32 {
		return false
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	return got != "" && hmac.Equal([]byte(got), []byte(k.sign(c.Value)))
}

// Flash messages survive the redirect after an action in a signed cookie.
const flashCookie = "leasecron_flash"

type flash struct {
	OK   bool
	Text string
}

func (k *csrfKey) setFlash(w http.ResponseWriter, f flash) {
	kind := "err"
	if f.OK {
		kind = "ok"
	}
	v := base64.RawURLEncoding.EncodeToString([]byte(kind + "\n" + f.Text))
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: v + "." + k.sign(v), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: 60})
}

// takeFlash returns the flash message of r, if any, and clears it.
func (k *csrfKey) takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	v, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(k.sign(v))) {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil
	}
	kind, text, _ := strings.Cut(string(b), "\n")
	return &flash{OK: kind == "ok", Text: text}
}
