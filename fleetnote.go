package leasecron

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/presence"
)

// fleetNote is what the leader tells every instance waiting for the lease
// about the fleet, in the lease metadata (trafficcop.Options.Fleet),
// which those instances read at every lease poll anyway: a digest of the
// work queues in the account (q=…), so that a standby lists them only when
// one was added, and the instances asked to drain (d=…, ids
// query-escaped), so that a standby need not read its own presence for a
// request every few seconds. A standby hears of either within a lease
// poll of the leader's next renewal.
type fleetNote struct {
	mu sync.Mutex
	// The leader's side: what it says.
	queues string
	drain  []string
	// A standby's side: the digest it acted on, and whom to tell.
	heardQueues string
	relist      chan struct{} // the queue listing loop looks now
	lookFor     func()        // the presence announcer looks for a request now
}

func newFleetNote() *fleetNote { return &fleetNote{relist: make(chan struct{}, 1)} }

// text is the note the leader writes.
func (n *fleetNote) text() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	if n.queues != "" {
		parts = append(parts, "q="+n.queues)
	}
	if len(n.drain) > 0 {
		ids := make([]string, len(n.drain))
		for i, id := range n.drain {
			ids[i] = url.QueryEscape(id)
		}
		parts = append(parts, "d="+strings.Join(ids, ","))
	}
	return strings.Join(parts, ";")
}

// parseFleetNote reads text's digest and drain list; anything it does not
// know is ignored (another release's note).
func parseFleetNote(text string) (queues string, drain []string) {
	for part := range strings.SplitSeq(text, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "q":
			queues = v
		case "d":
			for e := range strings.SplitSeq(v, ",") {
				if id, err := url.QueryUnescape(e); err == nil && id != "" {
					drain = append(drain, id)
				}
			}
		}
	}
	return queues, drain
}

// heard acts on the leader's note as instance self reads it: a digest
// other than the one last acted on makes the queue listing look now; its
// own id in the drain list makes the presence announcer look for the
// request now.
func (n *fleetNote) heard(self, text string) {
	queues, drain := parseFleetNote(text)
	n.mu.Lock()
	changed := queues != "" && queues != n.heardQueues
	if changed {
		n.heardQueues = queues
	}
	look := n.lookFor
	n.mu.Unlock()
	if changed {
		select {
		case n.relist <- struct{}{}:
		default:
		}
	}
	if look != nil && slices.Contains(drain, self) {
		look()
	}
}

// setQueues records the digest of the work queues as this instance last
// listed them (the leader says it).
func (n *fleetNote) setQueues(digest string) {
	n.mu.Lock()
	n.queues = digest
	n.mu.Unlock()
}

// watchDrainRequests runs while the worker does: while it leads, every
// lease renewal interval it lists the presence blobs (one request) and
// names in its note the instances asked to drain that have not started
// to, announcing a change at once.
func (w *Worker) watchDrainRequests(ctx context.Context) {
	every := w.o.Lease.WithDefaults().RenewEvery
	for clock.Sleep(ctx, w.o.Clock, every) == nil {
		if !w.HasControl() {
			continue
		}
		ins, err := presence.List(ctx, w.sc.Blob.NewContainerClient(w.o.Names.Container))
		if err != nil {
			w.log.Debug("listing presence for drain requests", "err", err)
			continue
		}
		var ids []string
		for _, in := range ins {
			if !in.DrainAt.IsZero() && in.Draining.IsZero() && in.ID != w.o.InstanceID {
				ids = append(ids, in.ID)
			}
		}
		slices.Sort(ids)
		w.fleet.mu.Lock()
		changed := !slices.Equal(ids, w.fleet.drain)
		w.fleet.drain = ids
		w.fleet.mu.Unlock()
		if changed && w.cop != nil {
			w.cop.Announce()
		}
	}
}
