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

	"github.com/leasecron/leasecron/internal/storage"
)

// azureBlobs writes blobs to the account of a storage.Clients, creating the
// container on first use (and again if it was deleted).
type azureBlobs struct {
	clients *storage.Clients
	mu      sync.Mutex
	ready   map[string]bool
}

// NewBlobWriter returns the BlobWriter over the blob service of clients.
func NewBlobWriter(clients *storage.Clients) BlobWriter {
	return &azureBlobs{clients: clients, ready: map[string]bool{}}
}

func (a *azureBlobs) ensure(ctx context.Context, container string, force bool) error {
	a.mu.Lock()
	ok := a.ready[container]
	a.mu.Unlock()
	if ok && !force {
		return nil
	}
	if err := a.clients.EnsureContainer(ctx, container); err != nil {
		return err
	}
	a.mu.Lock()
	a.ready[container] = true
	a.mu.Unlock()
	return nil
}

// WriteBlob implements BlobWriter.
func (a *azureBlobs) WriteBlob(ctx context.Context, container, name, contentType string, data []byte) error {
	if err := a.ensure(ctx, container, false); err != nil {
		return err
	}
	bb := a.clients.Blob.NewContainerClient(container).NewBlockBlobClient(name)
	upload := func() error {
		_, err := bb.Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), &blockblob.UploadOptions{
			HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &contentType},
		})
		return storage.Translate(err)
	}
	err := upload()
	if errors.Is(err, storage.ErrNotFound) { // the container was deleted under us
		if err = a.ensure(ctx, container, true); err == nil {
			err = upload()
		}
	}
	if err != nil {
		return fmt.Errorf("upload blob %s/%s: %w", container, name, err)
	}
	return nil
}
