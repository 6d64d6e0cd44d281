package trafficcop

import (
	"context"
	"fmt"
	"time"
)

// HolderInfo is what the lease blob says about its holder.
type HolderInfo struct {
	// Holder is the identity of the cop that acquired last. It stays in the
	// metadata after that cop released or lost the lease: see Held.
	Holder string
	// Acquired is when that cop acquired.
	Acquired time.Time
	// Generation is the generation of that acquisition (0: never acquired).
	Generation int64
	// Renewed is the start of that cop's last recorded renewal (its
	// acquisition until it first renews; zero if not recorded).
	Renewed time.Time
	// Released reports that the cop released the lease gracefully.
	Released bool
	// State is the lease state reported by the service.
	State LeaseState
	// Locked is the lease status: true while a lease is in force.
	Locked bool
}

// Held reports whether a lease is in force, i.e. whether Holder is the
// current holder rather than the last one.
func (h HolderInfo) Held() bool { return h.State == LeaseLeased || h.State == LeaseBreaking }

// ReadHolder reads who holds the lease on lock (for a blob, build it with
// NewBlobLock) without competing for it. A missing record yields an error
// wrapping leasecrontype.ErrNotFound.
func ReadHolder(ctx context.Context, lock Lock) (HolderInfo, error) {
	if lock == nil {
		return HolderInfo{}, fmt.Errorf("%w: nil Lock", ErrInvalidOptions)
	}
	return readHolder(ctx, lock)
}

func readHolder(ctx context.Context, lock Lock) (HolderInfo, error) {
	st, err := lock.Get(ctx)
	if err != nil {
		return HolderInfo{}, err
	}
	h := HolderInfo{Holder: st.Metadata[MetaHolder], State: st.State, Locked: st.Locked}
	if h.Generation, err = parseGeneration(st.Metadata[MetaGeneration]); err != nil {
		return h, fmt.Errorf("%s: %w", lock, err)
	}
	h.Released = h.Generation > 0 && st.Metadata[MetaReleased] == st.Metadata[MetaGeneration]
	if s := st.Metadata[MetaRenewed]; s != "" {
		// Informational: a malformed value is ignored, as the cop does.
		h.Renewed, _ = time.Parse(time.RFC3339Nano, s)
	}
	if s := st.Metadata[MetaAcquired]; s != "" {
		if h.Acquired, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return h, fmt.Errorf("%s: acquired metadata %q is not an RFC 3339 time: %w", lock, s, err)
		}
	}
	return h, nil
}
