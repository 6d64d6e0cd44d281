package payload

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// MemoryContainer is the container name in references a Memory store hands out.
const MemoryContainer = "memory"

// Memory is an in-memory Store for tests. The zero value is not usable;
// create one with NewMemory.
type Memory struct {
	mu    sync.Mutex
	blobs map[string][]byte
	// FailPut, when set, is returned by Put (tests of cleanup paths).
	FailPut error
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{blobs: map[string][]byte{}} }

// Put implements Store.
func (m *Memory) Put(ctx context.Context, name string, data []byte) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.FailPut != nil {
		return "", m.FailPut
	}
	if name == "" {
		return "", fmt.Errorf("payload put: empty blob name")
	}
	m.blobs[name] = append([]byte(nil), data...)
	return MemoryContainer + "/" + name, nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, ref string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name, err := splitRef(ref, MemoryContainer)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.blobs[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	return append([]byte(nil), d...), nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, ref string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := splitRef(ref, MemoryContainer)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.blobs, name)
	m.mu.Unlock()
	return nil
}

// Names returns the stored blob names, sorted.
func (m *Memory) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.blobs))
	for k := range m.blobs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
