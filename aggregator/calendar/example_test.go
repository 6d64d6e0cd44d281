package calendar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/leasecron/leasecron/leasecrontype"

	"github.com/leasecron/leasecron/aggregator/calendar"
)

// printBlobs is a BlobWriter that keeps what it is given.
type printBlobs map[string][]byte

func (p printBlobs) WriteBlob(_ context.Context, container, name, _ string, data []byte) error {
	p[container+"/"+name] = data
	return nil
}

// Merge the four sample cities, served over HTTP the way the demo does.
func Example() {
	srv := httptest.NewServer(http.FileServerFS(calendar.Fixtures()))
	defer srv.Close()

	blobs := printBlobs{}
	h, err := calendar.New(calendar.Options{Blobs: blobs})
	if err != nil {
		fmt.Println(err)
		return
	}
	payload := `{"feeds": [`
	for i, city := range calendar.Cities {
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
	_ = json.Unmarshal(blobs["leasecron/"+sumName], &sum)
	fmt.Printf("%s written: %v\n", icsName, len(blobs["leasecron/"+icsName]) > 0)
	fmt.Println("events:", sum.Events, "duplicates:", sum.Duplicates)
	fmt.Println("time zones:", sum.Timezones)
	// Output:
	// error: <nil>
	// calendars/elmcity.ics written: true
	// events: 24 duplicates: 4
	// time zones: [America/Indiana/Indianapolis America/Los_Angeles America/New_York Europe/London]
}
