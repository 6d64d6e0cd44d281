// Package memstore is an in-memory Azure Storage account: the Blob, Queue
// and Table services, speaking the REST protocol the Azure Go SDK (azblob,
// azqueue, aztables) uses, so that leasecron's own storage code, built from
// a connection string, runs against it unchanged and without a network.
//
// It is made for a deterministic simulator of a whole fleet that runs many
// workers in one process inside a testing/synctest bubble: it starts no
// goroutine and no timer of its own, and every state that depends on time
// (a lease's expiry and break period, a message's visibility and expiry) is
// evaluated lazily, on each request, from the clock given in
// Options.Now. Identifiers it makes up (message ids, pop receipts, lease
// ids it proposes, request ids, ETags) come from counters, not from a
// random source, so that a run can be replayed. Requests are served one at
// a time under one mutex, so each is atomic.
//
// Use it in-process through Transport (an azcore policy.Transporter and an
// http.RoundTripper that calls the services directly, routed by the
// request's host) with ConnectionString, whose endpoints are on made-up
// hosts; or serve it on loopback listeners with Listen, for code and tests
// that build their own HTTP clients. Requests counts what was asked of it
// by operation (for exact request-count tests), and
// Options.DuplicateDelivery lets a simulator inject the duplicate
// deliveries of Azure's at-least-once queues.
//
// What it implements, following Azure's documented behaviour where
// leasecron depends on it (and Azurite where the documentation is silent):
//
//   - Blob: containers (create, delete, properties, metadata, list); block
//     blobs uploaded in one request, with metadata and content headers;
//     download (with a range), properties, metadata and content headers,
//     delete; flat and hierarchical listing with prefix, metadata, paging;
//     leases on blobs (acquire, renew, change, release, break) with the
//     whole state machine (available, leased, expired, breaking, broken)
//     and its errors; the conditional headers If-Match, If-None-Match,
//     If-Modified-Since and If-Unmodified-Since. Every write changes the
//     blob's ETag and Last-Modified; lease operations do not.
//   - Queue: queues (create, delete, properties, metadata, list) and
//     messages (put, get, peek, update, delete, clear) with visibility
//     timeouts, pop receipts, dequeue counts, time-to-live (-1: never) and
//     the 64 KiB limit.
//   - Table: tables (create, delete, query); entities (get, insert,
//     update, merge, insert-or-replace, insert-or-merge, delete) with
//     If-Match; queries with $filter (the OData subset the Table service
//     accepts: comparisons of strings, booleans, numbers, datetime'…',
//     guid'…' and binary literals, and, or, not, parentheses), $select,
//     $top and continuation (at most 1,000 entities a page); entity-group
//     transactions ($batch, one changeset, all or nothing, failures
//     reported as the service reports them); typed properties (Edm.String,
//     Boolean, Int32, Int64, Double, DateTime, Guid, Binary) kept with
//     their @odata.type annotations; Timestamp and odata.etag; the Accept
//     metadata levels and Prefer: return-no-content.
//   - Errors as the services send them: the XML (blob, queue) or JSON
//     (table, odata.error) body and the x-ms-error-code header.
//
// What it does not do: check signatures or SAS tokens (any account key
// is accepted), keep anything when the Server is dropped, serve page or
// append blobs, blocks and block lists, snapshots, versions, soft delete,
// tags, container leases, access policies, CORS or service properties,
// emulate throttling, latency or the service's delays (a deleted
// container or table can be created again at once), or hand out the
// opaque continuation tokens Azure does (its tokens name the next keys).
// Table ETags are derived from the entity's Timestamp, which the service
// keeps strictly increasing (a write at the same instant as the previous
// one is stamped 100 ns after it), so that every version of an entity has
// its own ETag even when the injected clock stands still.
package memstore
