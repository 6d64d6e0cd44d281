package storage

import (
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Counter counts storage requests by operation and status class. It is an
// azcore pipeline policy, so it sees every request the SDK sends, including
// retries (Azure bills each of them as a transaction).
type Counter struct {
	mu     sync.Mutex
	counts map[RequestKey]int64
	// OnRequest, when set, is called after every request (for metrics). It
	// must not block.
	OnRequest func(k RequestKey)
}

// RequestKey identifies a kind of request.
type RequestKey struct {
	// Service is blob, queue or table.
	Service string
	// Op is a short operation name, e.g. "lease", "put", "dequeue",
	// "query", "batch".
	Op string
	// Status is the HTTP status code, or 0 when no response arrived.
	Status int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: map[RequestKey]int64{}} }

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[RequestKey]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[RequestKey]int64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Total returns the number of requests counted.
func (c *Counter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.counts {
		n += v
	}
	return n
}

// ByOp returns counts summed over status, keyed "service op", sorted keys.
func (c *Counter) ByOp() (keys []string, counts map[string]int64) {
	counts = map[string]int64{}
	for k, v := range c.Snapshot() {
		counts[k.Service+" "+k.Op] += v
	}
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, counts
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = map[RequestKey]int64{}
	c.mu.Unlock()
}

func (c *Counter) policy(svc string) policy.Policy { return counterPolicy{c: c, svc: svc} }

type counterPolicy struct {
	c   *Counter
	svc string
}

func (p counterPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	k := RequestKey{Service: p.svc, Op: opName(p.svc, req.Raw())}
	if resp != nil {
		k.Status = resp.StatusCode
	}
	p.c.mu.Lock()
	if p.c.counts == nil {
		p.c.counts = map[RequestKey]int64{}
	}
	p.c.counts[k]++
	p.c.mu.Unlock()
	if p.c.OnRequest != nil {
		p.c.OnRequest(k)
	}
	return resp, err
}

// opName names a request by what it does, from its method, path and query.
func opName(svc string, r *http.Request) string {
	q := r.URL.Query()
	comp := q.Get("comp")
	path := r.URL.Path
	switch svc {
	case "blob":
		switch {
		case comp == "lease":
			return "lease-" + strings.ToLower(header(r, "x-ms-lease-action"))
		case comp == "metadata":
			return strings.ToLower(r.Method) + "-metadata"
		case comp == "list" || q.Get("restype") == "container" && r.Method == http.MethodGet:
			return "list"
		case q.Get("restype") == "container":
			return strings.ToLower(r.Method) + "-container"
		case comp != "":
			return strings.ToLower(r.Method) + "-" + comp
		}
		return strings.ToLower(r.Method)
	case "queue":
		switch {
		case strings.HasSuffix(path, "/messages") && r.Method == http.MethodGet:
			if q.Get("peekonly") == "true" {
				return "peek"
			}
			return "dequeue"
		case strings.HasSuffix(path, "/messages") && r.Method == http.MethodPost:
			return "enqueue"
		case strings.Contains(path, "/messages/") && r.Method == http.MethodDelete:
			return "delete-message"
		case strings.Contains(path, "/messages/") && r.Method == http.MethodPut:
			return "update-message"
		case comp == "metadata":
			return "get-properties"
		case comp != "":
			return strings.ToLower(r.Method) + "-" + comp
		}
		return strings.ToLower(r.Method) + "-queue"
	case "table":
		switch {
		case strings.HasSuffix(path, "$batch"):
			return "batch"
		case strings.HasSuffix(path, "/Tables") || strings.Contains(path, "/Tables("):
			return strings.ToLower(r.Method) + "-table"
		case r.Method == http.MethodGet && strings.Contains(path, "(PartitionKey="):
			return "get-entity"
		case r.Method == http.MethodGet:
			return "query"
		case r.Method == http.MethodPost:
			return "insert"
		case r.Method == http.MethodPut:
			return "update"
		case r.Method == "MERGE" || r.Method == http.MethodPatch:
			return "merge"
		case r.Method == http.MethodDelete:
			return "delete"
		}
	}
	return strings.ToLower(r.Method)
}

// header returns the first value of the header name, however its key is
// spelled: the SDKs set x-ms-* headers under their lower-case names, which
// Header.Get (canonical keys only) does not find.
func header(r *http.Request, name string) string {
	for k, v := range r.Header {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}

// OpName names a request to service svc ("blob", "queue" or "table") as
// Counter does: "lease-acquire", "dequeue", "batch", ...
func OpName(svc string, r *http.Request) string { return opName(svc, r) }
