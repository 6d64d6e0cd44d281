package calendar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/storage"
)

// BlobWriter stores one output blob: NewBlobWriter's over an Azure blob
// container, or any other (an in-memory map in tests).
type BlobWriter interface {
	// WriteBlob creates or overwrites the blob name with data.
	WriteBlob(ctx context.Context, name, contentType string, data []byte) error
}

// azureBlobs writes blobs to one container, creating it on first use (and
// again if it was deleted).
type azureBlobs struct {
	c     *container.Client
	name  string
	mu    sync.Mutex
	ready bool
}

// NewBlobWriter returns the BlobWriter over c, a client for the container
// that receives the calendars (leasecron's worker uses its
// names.container, "leasecron" by default), built with the caller's own
// credential (azblob's ServiceClient.NewContainerClient, or
// container.NewClientFromConnectionString). It does not contact the
// service; the container is created on the first write.
func NewBlobWriter(c *container.Client) (BlobWriter, error) {
	if c == nil {
		return nil, errors.New("calendar: NewBlobWriter: the container client is nil")
	}
	name, err := storage.NameFromURL(c.URL(), storage.ValidateContainerName)
	if err != nil {
		return nil, fmt.Errorf("calendar: NewBlobWriter: container client %w", err)
	}
	return &azureBlobs{c: c, name: name}, nil
}

func (a *azureBlobs) ensure(ctx context.Context, force bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready && !force {
		return nil
	}
	_, err := a.c.Create(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create container %s: %w", a.name, err)
	}
	a.ready = true
	return nil
}

// WriteBlob implements BlobWriter.
func (a *azureBlobs) WriteBlob(ctx context.Context, name, contentType string, data []byte) error {
	if err := a.ensure(ctx, false); err != nil {
		return err
	}
	bb := a.c.NewBlockBlobClient(name)
	upload := func() error {
		_, err := bb.Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
			HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &contentType},
		})
		return storage.Translate(err)
	}
	err := upload()
	if errors.Is(err, storage.ErrNotFound) { // the container was deleted under us
		if err = a.ensure(ctx, true); err == nil {
			err = upload()
		}
	}
	if err != nil {
		return fmt.Errorf("upload blob %s/%s: %w", a.name, name, err)
	}
	return nil
}
