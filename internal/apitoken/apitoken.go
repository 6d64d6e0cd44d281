// Package apitoken keeps the API tokens of leasecron's HTTP API: one small
// JSON blob per token (control/tokens/NAME.json in the leasecron
// container) holding its role, the task types it is limited to and the
// SHA-256 of its secret, never the secret itself. A token reads
// lct.NAME.SECRET, so checking one is a point read of its blob.
package apitoken

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/tasktype"
)

// Prefix is where the token blobs live in the container.
const Prefix = "control/tokens/"

// The roles a token can hold.
const (
	RoleViewer    = "viewer"
	RoleScheduler = "scheduler"
	RoleOperator  = "operator"
)

// Roles are the roles accepted, least to most.
var Roles = []string{RoleViewer, RoleScheduler, RoleOperator}

var (
	// ErrNotFound: no token of that name.
	ErrNotFound = notfound.New("no such API token")
	// ErrExists: a token of that name exists already.
	ErrExists = errors.New("an API token of that name exists")
	// ErrInvalid wraps bad names, roles and types.
	ErrInvalid = errors.New("invalid API token")
	// ErrUnauthorized: the secret is malformed, unknown or revoked.
	ErrUnauthorized = errors.New("unknown or revoked API token")
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Token is what is stored of a token (Hash is the SHA-256 of the secret,
// hex; it is never sent to a caller).
type Token struct {
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Types   []string  `json:"types,omitempty"`
	Created time.Time `json:"created"`
	By      string    `json:"by,omitempty"`
	Hash    string    `json:"hash,omitempty"`
}

// Allows reports whether the token may touch tasks of type typ.
func (t Token) Allows(typ string) bool { return len(t.Types) == 0 || slices.Contains(t.Types, typ) }

// Store reads and writes the token blobs.
type Store struct {
	c   *container.Client
	clk clock.Clock
}

// New returns the Store over the container c (created on the first Create).
func New(c *container.Client, clk clock.Clock) *Store {
	return &Store{c: c, clk: clock.OrReal(clk)}
}

// Check validates a name, a role and types, naming what is accepted.
func Check(name, role string, types []string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: name %q: want 1 to 63 of a-z, 0-9 and -, starting with a letter or digit", ErrInvalid, name)
	}
	if !slices.Contains(Roles, role) {
		return fmt.Errorf("%w: role %q: want one of %s", ErrInvalid, role, strings.Join(Roles, ", "))
	}
	for _, t := range types {
		// The rule every task type follows: a token limited to a type no
		// task can have would touch nothing.
		if err := tasktype.Validate(t); err != nil {
			return fmt.Errorf("%w: token types: %w", ErrInvalid, err)
		}
	}
	return nil
}

// blobName is where the token called name is kept.
func blobName(name string) string { return Prefix + name + ".json" }

func (s *Store) blob(name string) *blockblob.Client { return s.c.NewBlockBlobClient(blobName(name)) }

func hashOf(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Create stores a new token and returns it with its full secret, which is
// shown once: only its hash is kept.
func (s *Store) Create(ctx context.Context, name, role string, types []string, by string) (Token, string, error) {
	if err := Check(name, role, types); err != nil {
		return Token{}, "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Token{}, "", err
	}
	secret := base64.RawURLEncoding.EncodeToString(raw)
	t := Token{Name: name, Role: role, Types: slices.Clone(types), Created: s.clk.Now().UTC(), By: by, Hash: hashOf(secret)}
	b, err := json.Marshal(t)
	if err != nil {
		return Token{}, "", err
	}
	anyTag := azcore.ETagAny
	err = storage.PutJSON(ctx, s.c, blobName(name), b, &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag})
	switch {
	case errors.Is(err, storage.ErrAlreadyExists) || errors.Is(err, storage.ErrPreconditionFailed):
		return Token{}, "", fmt.Errorf("%w: %q (revoke it first, or choose another name)", ErrExists, name)
	case err != nil:
		return Token{}, "", fmt.Errorf("store API token %q: %w", name, err)
	}
	t.Hash = ""
	return t, "lct." + name + "." + secret, nil
}

// Get reads the token called name, hash included.
func (s *Store) Get(ctx context.Context, name string) (Token, error) {
	resp, err := s.blob(name).DownloadStream(ctx, nil)
	if err = storage.Translate(err); errors.Is(err, storage.ErrNotFound) {
		return Token{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	} else if err != nil {
		return Token{}, fmt.Errorf("read API token %q: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Token{}, fmt.Errorf("read API token %q: %w", name, err)
	}
	var t Token
	if err := json.Unmarshal(b, &t); err != nil {
		return Token{}, fmt.Errorf("read API token %q: not the expected JSON: %w", name, err)
	}
	return t, nil
}

// Split reads lct.NAME.SECRET; ok is false for anything else.
func Split(token string) (name, secret string, ok bool) {
	rest, found := strings.CutPrefix(token, "lct.")
	if !found {
		return "", "", false
	}
	name, secret, found = strings.Cut(rest, ".")
	return name, secret, found && nameRE.MatchString(name) && len(secret) >= 32
}

// Verify returns the token a full token string names when its secret
// matches (ErrUnauthorized otherwise, also for a token revoked or never
// made). Other errors are storage's.
func (s *Store) Verify(ctx context.Context, token string) (Token, error) {
	name, secret, ok := Split(token)
	if !ok {
		return Token{}, ErrUnauthorized
	}
	t, err := s.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return Token{}, ErrUnauthorized
	} else if err != nil {
		return Token{}, err
	}
	if subtle.ConstantTimeCompare([]byte(hashOf(secret)), []byte(t.Hash)) != 1 {
		return Token{}, ErrUnauthorized
	}
	t.Hash = ""
	return t, nil
}

// Revoke deletes the token called name.
func (s *Store) Revoke(ctx context.Context, name string) error {
	_, err := s.blob(name).Delete(ctx, nil)
	if err = storage.Translate(err); errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return err
}

// List returns every token, by name, without hashes.
func (s *Store) List(ctx context.Context) ([]Token, error) {
	prefix := Prefix
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	var out []Token
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err = storage.Translate(err); errors.Is(err, storage.ErrNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("list API tokens: %w", err)
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil {
				continue
			}
			name := strings.TrimSuffix(strings.TrimPrefix(*it.Name, Prefix), ".json")
			t, err := s.Get(ctx, name)
			if errors.Is(err, ErrNotFound) {
				continue // revoked meanwhile
			} else if err != nil {
				return nil, err
			}
			t.Hash = ""
			out = append(out, t)
		}
	}
	return out, nil
}
