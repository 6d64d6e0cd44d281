package calendar

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func azClients(t *testing.T) *storage.Clients {
	t.Helper()
	c, err := storage.New(storage.Config{ConnectionString: azuritetest.Shared(t).ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func download(t *testing.T, ctx context.Context, c *storage.Clients, container, name string) ([]byte, string) {
	t.Helper()
	resp, err := c.Blob.NewContainerClient(container).NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		t.Fatalf("download %s/%s: %v", container, name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ct := ""
	if resp.ContentType != nil {
		ct = *resp.ContentType
	}
	return b, ct
}

// blobWriter is the BlobWriter over container of c.
func blobWriter(t *testing.T, c *storage.Clients, container string) BlobWriter {
	t.Helper()
	w, err := NewBlobWriter(c.Blob.NewContainerClient(container))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWritesBlobsToAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := azClients(t)
	container := azuritetest.Name(t, "c")
	srv := newFeedServer(t)
	h, err := New(Options{Blobs: blobWriter(t, c, container), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p := payload(srv.url("localist"), srv.url("aroundfred"))
	if err := h(ctx, task("baltimore", p)); err != nil {
		t.Fatal(err)
	}
	body, ct := download(t, ctx, c, container, "calendars/baltimore.ics")
	if !strings.HasPrefix(ct, "text/calendar") {
		t.Fatalf("content type %q", ct)
	}
	_, byUID := eventsByUID(t, body)
	if len(byUID) != 10 || len(byUID["bay-cleanup-2026@chesapeake.example"]) != 1 {
		t.Fatalf("%d UIDs in the blob", len(byUID))
	}
	js, ct := download(t, ctx, c, container, "calendars/baltimore.json")
	if ct != "application/json" {
		t.Fatalf("summary content type %q", ct)
	}
	if sum := readSummary(t, js); sum.Events != 12 || sum.Duplicates != 2 || !sum.Written {
		t.Fatalf("summary %+v", sum)
	}
	// Second run: 304s, the same bytes in the blob.
	if err := h(ctx, task("baltimore", p)); err != nil {
		t.Fatal(err)
	}
	again, _ := download(t, ctx, c, container, "calendars/baltimore.ics")
	if !bytes.Equal(body, again) || srv.notMod.Load() != 2 {
		t.Fatalf("second run: identical %v, 304s %d", bytes.Equal(body, again), srv.notMod.Load())
	}
	// The container is recreated if someone deletes it.
	if _, err := c.Blob.DeleteContainer(ctx, container, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err = h(ctx, task("baltimore", p))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // a deleted container's name is briefly unavailable
	}
	if err != nil {
		t.Fatalf("after the container was deleted: %v", err)
	}
	download(t, ctx, c, container, "calendars/baltimore.json")
}

// The calendar handler on the blackboard: a failing feed shows on the
// blackboard as LastError, and the good feeds are still published.
func TestOnTheBlackboardOnAzurite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := azClients(t)
	container := azuritetest.Name(t, "c")
	table := azuritetest.Name(t, "t")
	srv := newFeedServer(t)
	h, err := New(Options{Blobs: blobWriter(t, c, container), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	board, err := blackboard.NewBoard(c.Table, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := board.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	for _, city := range cities {
		if err := board.Add(ctx, blackboard.Entry{Key: city, Interval: time.Hour, Type: Type, Payload: string(payload(srv.url(city)))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := board.Add(ctx, blackboard.Entry{Key: "broken", Interval: time.Hour, Type: Type,
		Payload: srv.url("westlafcals") + "\n" + srv.url("malformed") + "\n"}, nil); err != nil {
		t.Fatal(err)
	}
	w, err := blackboard.NewWorker(c.Table, blackboard.Options{
		Settings: blackboard.Settings{MaxConcurrent: 2}, Table: table, Logger: quiet,
		Handlers: func(typ string) (leasecrontype.Handler, bool) { return h, typ == Type }})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.RunOnce(ctx)
	if err != nil || rep.Claimed != 5 {
		t.Fatalf("cycle %+v, %v", rep, err)
	}
	rows, err := board.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		if e.Running || e.Runs != 1 {
			t.Errorf("row %+v", e)
		}
		switch e.Key {
		case "broken":
			if !strings.Contains(e.LastError, "1 of 2 feeds failed") || !strings.Contains(e.LastError, "malformed.ics: feed malformed") {
				t.Errorf("LastError %q", e.LastError)
			}
		default:
			if e.LastError != "" {
				t.Errorf("%s: LastError %q", e.Key, e.LastError)
			}
		}
		js, _ := download(t, ctx, c, container, "calendars/"+e.Key+".json")
		if sum := readSummary(t, js); sum.Events != 7 || !sum.Written {
			t.Errorf("%s summary %+v", e.Key, sum)
		}
	}
}
