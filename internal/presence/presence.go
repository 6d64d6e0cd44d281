// Package presence makes every worker visible from its start to its stop,
// idle or busy: a small blob per instance ({Prefix}/{member}), written when
// the worker starts and again every Every, and deleted when it stops. The
// fleet page and `leasecron stats` list the blobs (one request per 5,000
// instances) and judge an instance present by the service's Last-Modified
// time of its blob, so no worker's clock is compared with another's.
//
// It costs a worker 3600/Every writes an hour (12 with the default) and
// one at its start and stop. Sharded workers also hold a member lease
// (package shard), which says at once when one dies; presence says it
// within Every.
package presence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Prefix is the folder of the presence blobs in the lock container.
const Prefix = "presence"

// DefaultEvery is how often a worker writes its presence blob again.
const DefaultEvery = 5 * time.Minute

// Metadata keys of a presence blob.
const (
	metaInstance = "instance"
	metaVersion  = "version"
	metaStarted  = "started"
)

// Instance is a worker as its presence blob shows it.
type Instance struct {
	// ID is the instance id (worker.instance_id).
	ID string
	// Version is what it runs.
	Version string
	// Started is when it started (its own clock).
	Started time.Time
	// Seen is when it last wrote its blob (the service's clock).
	Seen time.Time
}

// Present reports whether the instance wrote its blob within two periods
// (DefaultEvery) and a minute before now: a stopped worker deletes its
// blob, a killed one is absent after that.
func (i Instance) Present(now time.Time) bool {
	return now.Sub(i.Seen) < 2*DefaultEvery+time.Minute
}

// Announcer keeps one instance's presence blob.
type Announcer struct {
	C        *container.Client
	Name     string // the blob's name under Prefix (shard.MemberName of the id)
	Instance string
	Version  string
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Run writes the blob now and every DefaultEvery until ctx ends, then
// deletes it.
// A write that fails is logged and tried again at the next period (or
// after a few seconds for the first one); Run returns nil when ctx ends.
func (a *Announcer) Run(ctx context.Context) error {
	clk := clock.OrReal(a.Clock)
	log := a.Logger
	if log == nil {
		log = slog.Default()
	}
	started := clk.Now().UTC()
	blob := a.C.NewBlockBlobClient(Prefix + "/" + a.Name)
	meta := map[string]*string{
		metaInstance: to.Ptr(a.Instance),
		metaStarted:  to.Ptr(started.Format(time.RFC3339Nano)),
	}
	if a.Version != "" {
		meta[metaVersion] = to.Ptr(a.Version)
	}
	written, created := false, false
	for {
		_, err := blob.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: meta})
		if err == nil {
			written = true
		} else if ctx.Err() == nil {
			err = storage.Translate(err)
			if errors.Is(err, storage.ErrNotFound) && !created {
				// The container is made by the worker's start; on a
				// fresh account it may not be there yet.
				created = true
				if _, cerr := a.C.Create(ctx, nil); cerr == nil {
					continue
				}
			}
			log.Warn("writing this instance's presence failed; trying again", "err", err)
		}
		wait := DefaultEvery
		if !written {
			wait = 5 * time.Second
		}
		if clock.Sleep(ctx, clk, wait) != nil {
			break
		}
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := blob.Delete(dctx, nil); err != nil && !errors.Is(storage.Translate(err), storage.ErrNotFound) {
		log.Warn("removing this instance's presence failed; it shows until it lapses", "err", err)
	}
	return nil
}

// List returns every presence blob (one request per 5,000 blobs).
func List(ctx context.Context, c *container.Client) ([]Instance, error) {
	var out []Instance
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  to.Ptr(Prefix + "/"),
		Include: container.ListBlobsInclude{Metadata: true},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			err = storage.Translate(err)
			if errors.Is(err, storage.ErrNotFound) {
				return nil, nil // no container yet: nobody has started
			}
			return nil, fmt.Errorf("list presence blobs: %w", err)
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name == nil || b.Properties == nil || b.Properties.LastModified == nil {
				continue
			}
			in := Instance{ID: strings.TrimPrefix(*b.Name, Prefix+"/"), Seen: b.Properties.LastModified.UTC()}
			for k, v := range b.Metadata {
				if v == nil {
					continue
				}
				switch strings.ToLower(k) {
				case metaInstance:
					in.ID = *v
				case metaVersion:
					in.Version = *v
				case metaStarted:
					in.Started, _ = time.Parse(time.RFC3339Nano, *v)
				}
			}
			out = append(out, in)
		}
	}
	return out, nil
}
