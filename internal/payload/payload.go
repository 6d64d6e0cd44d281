// Package payload is the claim-check store for task payloads too large to
// travel inline in a table row or a queue message.
//
// The scheduler stores such a payload as a blob when the task is scheduled
// and carries only a reference (Store.Put's ref) in the ScheduledItems row
// and in the queue envelope; the worker that runs the task resolves the
// reference with Store.Get.
//
// Ownership: a one-off task's blob belongs to that task (the consumer may
// delete it once the task has succeeded); a recurring series' blob is shared
// by all of its occurrences and is deleted when the series is cancelled, so a
// consumer must not delete a blob whose envelope names a series.
package payload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/leasecron/leasecron/internal/notfound"
)

// Store holds payload blobs. BlobStore is the Azure implementation and
// Memory the in-memory one for tests.
type Store interface {
	// Put stores data under name (overwriting a blob of that name) and
	// returns the reference to put into rows and envelopes.
	Put(ctx context.Context, name string, data []byte) (ref string, err error)
	// Get returns the data a reference points to. A reference that does not
	// belong to this store fails with ErrBadRef; a missing blob with
	// ErrNotFound.
	Get(ctx context.Context, ref string) ([]byte, error)
	// Delete removes the blob a reference points to. Deleting a blob that is
	// already gone is not an error.
	Delete(ctx context.Context, ref string) error
}

// Sentinel errors.
var (
	// ErrNotFound: the referenced payload blob does not exist.
	ErrNotFound = notfound.New("payload blob not found")
	// ErrBadRef: the reference is not one this store hands out.
	ErrBadRef = errors.New("bad payload reference")
	// ErrTooLarge: the blob is larger than the store's MaxSize.
	ErrTooLarge = errors.New("payload blob too large")
	// ErrInvalidOptions is wrapped by NewBlobStore's errors about its Options.
	ErrInvalidOptions = errors.New("invalid payload options")
)

// Prefix is the folder under which payload blobs are named.
const Prefix = "payloads/"

// NewName returns a fresh blob name for a payload of task id:
// "payloads/{id}-{16 random hex digits}". The random part keeps a
// rescheduled or replaced task from overwriting a blob an earlier queue
// message may still point to.
func NewName(id string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return Prefix + id + "-" + hex.EncodeToString(b[:])
}

// splitRef splits "container/name" into its parts, requiring container to
// equal want.
func splitRef(ref, want string) (string, error) {
	c, name, ok := strings.Cut(ref, "/")
	if !ok || name == "" {
		return "", fmt.Errorf("%w: %q: want %s/<blob name>", ErrBadRef, ref, want)
	}
	if c != want {
		return "", fmt.Errorf("%w: %q names container %q; this store reads only container %q", ErrBadRef, ref, c, want)
	}
	return name, nil
}
