package schedule

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/payload"
)

// PayloadStore keeps payloads too large to travel inline in a row and a
// queue message (a claim check): the Client stores them when a task is
// scheduled, the Mover when it moves a large directly inserted row, and
// the row and the envelope carry only the reference. NewPayloadStore
// returns one over a blob container; the queue consumer reads the same
// references (queue.PayloadFetcher is a subset of this interface).
//
// If the implementation also has a method Ensure(ctx) error, Client.Ensure
// calls it (to create the container).
type PayloadStore interface {
	// Put stores data under name (overwriting a payload of that name) and
	// returns the reference that rows and envelopes carry.
	Put(ctx context.Context, name string, data []byte) (ref string, err error)
	// Get returns the data a reference points to; a missing payload fails
	// with an error matching leasecrontype.ErrNotFound.
	Get(ctx context.Context, ref string) ([]byte, error)
	// Delete removes the payload a reference points to; deleting one that
	// is already gone is not an error.
	Delete(ctx context.Context, ref string) error
}

// NewPayloadStore returns a PayloadStore that keeps payloads as block blobs
// named "payloads/…" in the container c points at (leasecron's default is
// the "leasecron" container), with references "{container}/{blob name}".
// c carries the caller's credential. The container is created on the first
// Put if it is missing. Get reads at most 64 MiB.
func NewPayloadStore(c *container.Client) (PayloadStore, error) {
	s, err := payload.NewContainerStore(c, payload.Options{})
	if err != nil {
		return nil, fmt.Errorf("schedule.NewPayloadStore: %w", err)
	}
	return s, nil
}
