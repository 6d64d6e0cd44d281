package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// CreateContainer creates the container c unless it exists. Errors are
// Translate's.
func CreateContainer(ctx context.Context, c *container.Client) error {
	_, err := c.Create(ctx, nil)
	if err = Translate(err); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	return nil
}

// PutJSON writes b as the blob name of c (Content-Type application/json)
// under cond (nil: unconditionally), creating the container when it is
// not there yet (the blob's first write on a fresh account). Errors are
// Translate's: a failed condition is ErrPreconditionFailed (If-Match) or
// ErrAlreadyExists (If-None-Match: *).
func PutJSON(ctx context.Context, c *container.Client, name string, b []byte, cond *blob.ModifiedAccessConditions) error {
	ct := "application/json"
	o := &blockblob.UploadOptions{HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &ct}}
	if cond != nil {
		o.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: cond}
	}
	upload := func() error {
		_, err := c.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(b)), o)
		return Translate(err)
	}
	err := upload()
	if errors.Is(err, ErrNotFound) {
		if cerr := CreateContainer(ctx, c); cerr != nil {
			return fmt.Errorf("create the container for %s: %w", name, cerr)
		}
		err = upload()
	}
	return err
}
