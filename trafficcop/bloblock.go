package trafficcop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/leasecron/leasecron/internal/storage"
)

// blobLock implements Lock over one block blob and its lease.
type blobLock struct {
	container     *container.Client
	blob          *blob.Client
	block         *blockblob.Client
	containerName string
	blobName      string
}

// NewBlobLock returns the Lock over the block blob blobName in the
// container c: a container client the caller built with the Azure SDK and
// its own credential, for example
//
//	c, err := container.NewClientFromConnectionString(connStr, "leasecron", nil)
//
// or container.NewClient(url, azidentity credential, nil). It does not
// contact the service; Ensure creates the container and the blob. Give
// the client's options a short retry budget or rely on the cop's
// per-call deadline (Options.CallTimeout), which bounds every call.
func NewBlobLock(c *container.Client, blobName string) (Lock, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil container client", ErrInvalidOptions)
	}
	name, err := containerName(c.URL())
	if err != nil {
		return nil, fmt.Errorf("%w: container client: %w", ErrInvalidOptions, err)
	}
	if err := validateBlobName(blobName); err != nil {
		return nil, invalid("blob", strconv.Quote(blobName), err.Error())
	}
	return &blobLock{
		container:     c,
		blob:          c.NewBlobClient(blobName),
		block:         c.NewBlockBlobClient(blobName),
		containerName: name,
		blobName:      blobName,
	}, nil
}

// containerName is the last segment of a container client's URL (both
// https://{account}.blob.core.windows.net/{container} and Azurite's
// http://host:port/{account}/{container}), checked against the service's
// naming rules so that a bad name is refused before any request.
func containerName(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", rawURL, err)
	}
	name := path.Base(strings.TrimSuffix(u.Path, "/"))
	if err := storage.ValidateContainerName(name); err != nil {
		return "", fmt.Errorf("URL %q: %w", rawURL, err)
	}
	return name, nil
}

func (b *blobLock) String() string { return b.containerName + "/" + b.blobName }

func (b *blobLock) fail(op string, err error) error {
	return fmt.Errorf("%s %s: %w", op, b, storage.Translate(err))
}

// exists reports whether a conditional create failed only because the blob
// is already there (possibly leased).
func exists(err error) bool {
	return errors.Is(err, storage.ErrAlreadyExists) || errors.Is(err, storage.ErrPreconditionFailed) ||
		errors.Is(err, storage.ErrLeaseConflict)
}

func (b *blobLock) create(ctx context.Context) error {
	anyTag := azcore.ETagAny
	_, err := b.block.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag}},
	})
	if err = storage.Translate(err); err != nil && !exists(err) {
		return err
	}
	return nil
}

func (b *blobLock) Ensure(ctx context.Context) error {
	err := b.create(ctx)
	if errors.Is(err, storage.ErrNotFound) { // the container is missing
		_, cerr := b.container.Create(ctx, nil)
		if cerr = storage.Translate(cerr); cerr != nil && !errors.Is(cerr, storage.ErrAlreadyExists) {
			return fmt.Errorf("create container %s: %w", b.containerName, cerr)
		}
		err = b.create(ctx)
	}
	if err != nil {
		return fmt.Errorf("create blob %s: %w", b, err)
	}
	return nil
}

func (b *blobLock) leaseClient(leaseID string) (*lease.BlobClient, error) {
	return lease.NewBlobClient(b.blob, &lease.BlobClientOptions{LeaseID: &leaseID})
}

func (b *blobLock) Acquire(ctx context.Context, leaseID string, duration time.Duration) error {
	lc, err := b.leaseClient(leaseID)
	if err != nil {
		return fmt.Errorf("acquire lease on %s: %w", b, err)
	}
	if _, err := lc.AcquireLease(ctx, int32(duration/time.Second), nil); err != nil {
		return b.fail("acquire lease on", err)
	}
	return nil
}

func (b *blobLock) Renew(ctx context.Context, leaseID string) error {
	lc, err := b.leaseClient(leaseID)
	if err != nil {
		return fmt.Errorf("renew lease on %s: %w", b, err)
	}
	if _, err := lc.RenewLease(ctx, nil); err != nil {
		return b.fail("renew lease on", err)
	}
	return nil
}

func (b *blobLock) Release(ctx context.Context, leaseID string) error {
	lc, err := b.leaseClient(leaseID)
	if err != nil {
		return fmt.Errorf("release lease on %s: %w", b, err)
	}
	if _, err := lc.ReleaseLease(ctx, nil); err != nil {
		return b.fail("release lease on", err)
	}
	return nil
}

func (b *blobLock) Get(ctx context.Context) (LockState, error) {
	p, err := b.blob.GetProperties(ctx, nil)
	if err != nil {
		return LockState{}, b.fail("read properties of", err)
	}
	s := LockState{State: LeaseAvailable, Metadata: map[string]string{}}
	if p.LeaseState != nil {
		s.State = LeaseState(*p.LeaseState)
	}
	if p.LeaseStatus != nil {
		s.Locked = *p.LeaseStatus == lease.StatusTypeLocked
	}
	if p.ETag != nil {
		s.ETag = string(*p.ETag)
	}
	for k, v := range p.Metadata {
		if v != nil {
			// Header canonicalisation changes the case of metadata keys.
			s.Metadata[strings.ToLower(k)] = *v
		}
	}
	return s, nil
}

func (b *blobLock) SetMetadata(ctx context.Context, leaseID, ifMatch string, md map[string]string) error {
	m := make(map[string]*string, len(md))
	for k, v := range md {
		m[k] = &v
	}
	ac := &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &leaseID}}
	if ifMatch != "" {
		etag := azcore.ETag(ifMatch)
		ac.ModifiedAccessConditions = &blob.ModifiedAccessConditions{IfMatch: &etag}
	}
	_, err := b.blob.SetMetadata(ctx, m, &blob.SetMetadataOptions{AccessConditions: ac})
	if err != nil {
		return b.fail("write metadata of", err)
	}
	return nil
}
