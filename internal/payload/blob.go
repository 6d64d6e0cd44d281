package payload

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
)

// DefaultContainer is the container payload blobs live in.
const DefaultContainer = "leasecron"

// DefaultMaxSize is the largest payload blob Get reads.
const DefaultMaxSize = 64 << 20

// Options configures a BlobStore.
type Options struct {
	// Container holds the payload blobs. Default "leasecron".
	Container string
	// MaxSize is the largest blob Get will read into memory; larger blobs
	// fail with ErrTooLarge. Default 64 MiB.
	MaxSize int64
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Container = cmp.Or(o.Container, DefaultContainer)
	o.MaxSize = cmp.Or(o.MaxSize, DefaultMaxSize)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if err := storage.ValidateContainerName(o.Container); err != nil {
		return fmt.Errorf("%w: payload.Options.Container: %w", ErrInvalidOptions, err)
	}
	return opt.Positive(ErrInvalidOptions, "payload.Options.MaxSize", o.MaxSize, DefaultMaxSize)
}

// BlobStore keeps payloads as block blobs in one container. References have
// the form "{container}/{blob name}".
type BlobStore struct {
	c    *container.Client
	opts Options
}

var _ Store = (*BlobStore)(nil)

// NewBlobStore returns a store over the account's blob service. It does not
// contact the service; the container is created on first Put if missing.
func NewBlobStore(svc *service.Client, o Options) (*BlobStore, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, errors.New("payload.NewBlobStore: nil blob service client")
	}
	return &BlobStore{c: svc.NewContainerClient(o.Container), opts: o}, nil
}

// NewContainerStore returns a store over a container client the caller
// built (with its own credential); o.Container is taken from the client's
// URL. It does not contact the service.
func NewContainerStore(c *container.Client, o Options) (*BlobStore, error) {
	if c == nil {
		return nil, errors.New("payload store: nil container client")
	}
	parts, err := blob.ParseURL(c.URL())
	if err != nil || parts.ContainerName == "" {
		return nil, fmt.Errorf("payload store: container URL %q names no container", c.URL())
	}
	o.Container = parts.ContainerName
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &BlobStore{c: c, opts: o}, nil
}

// Container returns the container name.
func (s *BlobStore) Container() string { return s.opts.Container }

// Ensure creates the container if it does not exist.
func (s *BlobStore) Ensure(ctx context.Context) error {
	if err := storage.CreateContainer(ctx, s.c); err != nil {
		return fmt.Errorf("create payload container %s: %w", s.opts.Container, err)
	}
	return nil
}

// Put implements Store.
func (s *BlobStore) Put(ctx context.Context, name string, data []byte) (string, error) {
	if name == "" {
		return "", fmt.Errorf("payload put: empty blob name")
	}
	upload := func() error {
		_, err := s.c.NewBlockBlobClient(name).Upload(ctx, nopCloser{bytes.NewReader(data)}, nil)
		return storage.Translate(err)
	}
	err := upload()
	if errors.Is(err, storage.ErrNotFound) { // the container is missing
		if err = s.Ensure(ctx); err == nil {
			err = upload()
		}
	}
	if err != nil {
		return "", fmt.Errorf("payload put %s/%s (%d bytes): %w", s.opts.Container, name, len(data), err)
	}
	return s.opts.Container + "/" + name, nil
}

// Get implements Store.
func (s *BlobStore) Get(ctx context.Context, ref string) ([]byte, error) {
	name, err := splitRef(ref, s.opts.Container)
	if err != nil {
		return nil, err
	}
	resp, err := s.c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err = storage.Translate(err); err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotFound, ref, err)
		}
		return nil, fmt.Errorf("payload get %s: %w", ref, err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != nil && *resp.ContentLength > s.opts.MaxSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, ref, *resp.ContentLength, s.opts.MaxSize)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("payload get %s: read: %w", ref, storage.Translate(err))
	}
	if int64(len(data)) > s.opts.MaxSize {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, ref, s.opts.MaxSize)
	}
	return data, nil
}

// Delete implements Store.
func (s *BlobStore) Delete(ctx context.Context, ref string) error {
	name, err := splitRef(ref, s.opts.Container)
	if err != nil {
		return err
	}
	_, err = s.c.NewBlobClient(name).Delete(ctx, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("payload delete %s: %w", ref, err)
	}
	return nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
