package api_test

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
)

// A program that embeds leasecron serves the API beside its own routes;
// callers authenticate with tokens made by Client.CreateToken (or
// `leasecron tokens create`).
func ExampleNew() {
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")}})
	if err != nil {
		log.Fatal(err)
	}
	h, err := api.New(c, api.Options{MaxTasks: 500})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, h)                          // /api/v1/...
	mux.Handle("/jobs/", http.StripPrefix("/jobs", h)) // or /jobs/api/v1/...
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "my service") })
	_ = mux // http.ListenAndServe(":8080", mux)
}

// The OpenAPI document the server serves at /api/v1/openapi.json.
func ExampleOpenAPI() {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Title string `json:"title"`
		} `json:"info"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		log.Fatal(err)
	}
	fmt.Println(doc.OpenAPI, doc.Info.Title)
	// Output: 3.1.0 leasecron API
}
