package payload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestNewName(t *testing.T) {
	a, b := payload.NewName("job-1"), payload.NewName("job-1")
	if a == b || !strings.HasPrefix(a, "payloads/job-1-") || len(a) != len("payloads/job-1-")+16 {
		t.Fatalf("names %q %q", a, b)
	}
}

// exercise runs the Store contract against any implementation.
func exercise(t *testing.T, s payload.Store, container string) {
	data := bytes.Repeat([]byte("payload\x00\xff"), 20_000) // binary-safe, ~180 KB
	ref, err := s.Put(ctx(t), "payloads/x-1", data)
	if err != nil {
		t.Fatal(err)
	}
	if ref != container+"/payloads/x-1" {
		t.Fatalf("ref %q", ref)
	}
	got, err := s.Get(ctx(t), ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %d bytes, %v", len(got), err)
	}
	// Overwrite under the same name.
	if _, err := s.Put(ctx(t), "payloads/x-1", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx(t), ref); string(got) != "v2" {
		t.Fatalf("overwrite: %q", got)
	}
	for _, bad := range []string{"", "nocontainer", "other/payloads/x-1", container + "/"} {
		if _, err := s.Get(ctx(t), bad); !errors.Is(err, payload.ErrBadRef) {
			t.Errorf("Get(%q) = %v, want ErrBadRef", bad, err)
		}
	}
	if err := s.Delete(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx(t), ref); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.Get(ctx(t), ref); !errors.Is(err, payload.ErrNotFound) {
		t.Fatalf("Get deleted = %v, want ErrNotFound", err)
	}
}

func TestMemoryStore(t *testing.T) {
	exercise(t, payload.NewMemory(), payload.MemoryContainer)
}

func TestBlobStoreOnAzurite(t *testing.T) {
	srv := azuritetest.Shared(t)
	clients, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	container := azuritetest.Name(t, "p")
	// The container does not exist yet: Put creates it.
	s, err := payload.NewBlobStore(clients.Blob, payload.Options{Container: container})
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s, container)

	small, _ := payload.NewBlobStore(clients.Blob, payload.Options{Container: container, MaxSize: 10})
	ref, err := small.Put(ctx(t), "payloads/big", []byte("more than ten bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Get(ctx(t), ref); !errors.Is(err, payload.ErrTooLarge) {
		t.Fatalf("Get over MaxSize = %v", err)
	}
}

// A store over a container client the caller built takes the container's
// name from the client's URL (path-style on Azurite).
func TestContainerStoreOnAzurite(t *testing.T) {
	srv := azuritetest.Shared(t)
	clients, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	name := azuritetest.Name(t, "p")
	s, err := payload.NewContainerStore(clients.Blob.NewContainerClient(name), payload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Container() != name {
		t.Fatalf("container %q, want %q", s.Container(), name)
	}
	exercise(t, s, name)
	if _, err := payload.NewContainerStore(nil, payload.Options{}); err == nil {
		t.Fatal("nil container client accepted")
	}
}

func TestBlobStoreOptions(t *testing.T) {
	if _, err := payload.NewBlobStore(nil, payload.Options{Container: "Bad_Name"}); err == nil || !strings.Contains(err.Error(), `"Bad_Name"`) {
		t.Fatalf("bad container: %v", err)
	}
	if _, err := payload.NewBlobStore(nil, payload.Options{MaxSize: -1}); err == nil || !strings.Contains(err.Error(), "MaxSize = -1") {
		t.Fatalf("bad size: %v", err)
	}
	if _, err := payload.NewBlobStore(nil, payload.Options{}); err == nil {
		t.Fatal("nil client accepted")
	}
}

func ExampleMemory() {
	s := payload.NewMemory()
	ref, _ := s.Put(context.Background(), payload.Prefix+"report-1", []byte("a large payload"))
	data, _ := s.Get(context.Background(), ref)
	fmt.Println(ref)
	fmt.Println(string(data))
	// Output:
	// memory/payloads/report-1
	// a large payload
}
