package calendar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/blackboard/calendar"
	"github.com/leasecron/leasecron/leasecrontype"
)

// mapBlobs is a BlobWriter that keeps what it is given.
type mapBlobs map[string][]byte

func (p mapBlobs) WriteBlob(_ context.Context, name, _ string, data []byte) error {
	p[name] = data
	return nil
}

// Merge the four sample cities of the package's test data, served over
// HTTP the way the demo does.
func Example() {
	srv := httptest.NewServer(http.FileServerFS(os.DirFS("testdata")))
	defer srv.Close()

	blobs := mapBlobs{}
	h, err := calendar.New(calendar.Options{Blobs: blobs})
	if err != nil {
		fmt.Println(err)
		return
	}
	payload := `{"feeds": [`
	for i, city := range []string{"westlafcals", "networksierra", "localist", "aroundfred"} {
		if i > 0 {
			payload += ", "
		}
		payload += fmt.Sprintf("%q", srv.URL+"/"+city+".ics")
	}
	payload += `]}`
	err = h(context.Background(), leasecrontype.Task{ID: "elmcity@2026-08-01T12:00:00Z", Type: calendar.Type, Key: "elmcity", Payload: []byte(payload), Attempt: 1})
	fmt.Println("error:", err)

	icsName, sumName := calendar.BlobNames("elmcity")
	var sum calendar.Summary
	_ = json.Unmarshal(blobs[sumName], &sum)
	fmt.Printf("%s written: %v\n", icsName, len(blobs[icsName]) > 0)
	fmt.Println("events:", sum.Events, "duplicates:", sum.Duplicates)
	fmt.Println("time zones:", sum.Timezones)
	// Output:
	// error: <nil>
	// calendars/elmcity.ics written: true
	// events: 24 duplicates: 4
	// time zones: [America/Indiana/Indianapolis America/Los_Angeles America/New_York Europe/London]
}

// The handler over an Azure blob container, on a client built with its own
// credential (compile-only: it needs a storage account).
func ExampleNewBlobWriter() {
	c, err := container.NewClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), "leasecron", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	blobs, err := calendar.NewBlobWriter(c)
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := calendar.New(calendar.Options{Blobs: blobs})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = h // register it under calendar.Type: worker.Handle(calendar.Type, h)
}
