// Package pause keeps the fleet-wide pause state of task types in one small
// JSON blob (default leasecron/control/paused.json), so pausing needs no
// leader and no new table: `leasecron pause` writes it with a conditional
// write (If-Match on the ETag it read, If-None-Match for the first), and
// every consumer reads it — at most once per check interval, and only while
// it has work or holds paused messages (see queue.PauseSource).
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/notfound"
	"github.com/leasecron/leasecron/internal/storage"
)

// DefaultBlob is the blob, in the leasecron container, that holds the pause
// state.
const DefaultBlob = "control/paused.json"

// maxTries bounds read-modify-write retries against concurrent writers.
const maxTries = 10

// ErrNotPaused: Resume found the type not paused.
var ErrNotPaused = notfound.New("task type is not paused")

// Entry is one paused task type.
type Entry struct {
	// Type is the task type.
	Type string `json:"-"`
	// Since is when it was paused.
	Since time.Time `json:"since"`
	// Until is when the pause ends by itself; zero means until resumed.
	Until time.Time `json:"until,omitzero"`
	// By names who paused it (host and user of the CLI or program).
	By string `json:"by,omitempty"`
}

// active reports whether e still pauses its type at now.
func (e Entry) active(now time.Time) bool { return e.Until.IsZero() || e.Until.After(now) }

// doc is the blob's JSON.
type doc struct {
	V     int              `json:"v"`
	Types map[string]Entry `json:"types"`
}

// Store reads and writes the pause blob.
type Store struct {
	c    *container.Client
	blob *blockblob.Client
	name string
	clk  clock.Clock
}

// New returns the Store over the blob name in the container c (created on
// the first Pause). It does not contact the service.
func New(c *container.Client, name string, clk clock.Clock) (*Store, error) {
	if c == nil {
		return nil, errors.New("pause: nil container client")
	}
	if name == "" {
		name = DefaultBlob
	}
	return &Store{c: c, blob: c.NewBlockBlobClient(name), name: name, clk: clock.OrReal(clk)}, nil
}

// read returns the blob's state and ETag; a missing blob or container is
// the empty state with ETag "".
func (s *Store) read(ctx context.Context) (doc, string, error) {
	d := doc{V: 1, Types: map[string]Entry{}}
	resp, err := s.blob.DownloadStream(ctx, nil)
	if err = storage.Translate(err); errors.Is(err, storage.ErrNotFound) {
		return d, "", nil
	} else if err != nil {
		return d, "", fmt.Errorf("read pause state %s: %w", s.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return d, "", fmt.Errorf("read pause state %s: %w", s.name, err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, "", fmt.Errorf("read pause state %s: not the expected JSON: %w", s.name, err)
	}
	if d.Types == nil {
		d.Types = map[string]Entry{}
	}
	etag := ""
	if resp.ETag != nil {
		etag = string(*resp.ETag)
	}
	return d, etag, nil
}

// write stores d if the blob is still at etag ("" = does not exist).
func (s *Store) write(ctx context.Context, d doc, etag string) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	cond := &blob.ModifiedAccessConditions{}
	if etag == "" {
		anyTag := azcore.ETagAny
		cond.IfNoneMatch = &anyTag
	} else {
		tag := azcore.ETag(etag)
		cond.IfMatch = &tag
	}
	return storage.PutJSON(ctx, s.c, s.name, b, cond)
}

// modify applies fn to the current state and writes it back, re-reading
// when another writer got there first. Entries whose Until has passed are
// dropped on the way.
func (s *Store) modify(ctx context.Context, fn func(d *doc) error) error {
	for range maxTries {
		d, etag, err := s.read(ctx)
		if err != nil {
			return err
		}
		now := s.clk.Now()
		for t, e := range d.Types {
			if !e.active(now) {
				delete(d.Types, t)
			}
		}
		if err := fn(&d); err != nil {
			return err
		}
		err = s.write(ctx, d, etag)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrAlreadyExists):
			continue
		default:
			return fmt.Errorf("write pause state %s: %w", s.name, err)
		}
	}
	return fmt.Errorf("write pause state %s: changed concurrently %d times in a row", s.name, maxTries)
}

// Pause pauses typ until until (zero: until resumed), replacing an earlier
// pause of it, and returns the entry written.
func (s *Store) Pause(ctx context.Context, typ string, until time.Time, by string) (Entry, error) {
	e := Entry{Type: typ, Since: s.clk.Now().UTC(), By: by}
	if !until.IsZero() {
		e.Until = until.UTC()
	}
	err := s.modify(ctx, func(d *doc) error {
		d.Types[typ] = e
		return nil
	})
	return e, err
}

// Resume ends the pause of typ; ErrNotPaused when there is none.
func (s *Store) Resume(ctx context.Context, typ string) error {
	return s.modify(ctx, func(d *doc) error {
		if _, ok := d.Types[typ]; !ok {
			return fmt.Errorf("%w: %q", ErrNotPaused, typ)
		}
		delete(d.Types, typ)
		return nil
	})
}

// List returns the types paused now, by name.
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	d, _, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	now := s.clk.Now()
	out := make([]Entry, 0, len(d.Types))
	for t, e := range d.Types {
		if e.active(now) {
			e.Type = t
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// PausedTypes returns the types paused now with the end of each pause
// (zero: until resumed): queue.PauseSource, one blob read.
func (s *Store) PausedTypes(ctx context.Context) (map[string]time.Time, error) {
	es, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(es))
	for _, e := range es {
		out[e.Type] = e.Until
	}
	return out, nil
}
