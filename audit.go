package leasecron

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
)

// AuditEntry is one action recorded in the audit log: who did what, to
// which target, when, from where, and how it went. The dashboard records
// every action it takes and the command line every command that changes
// something; a program can record its own with Client.Audit.
type AuditEntry struct {
	// At is when the action was taken (zero: now).
	At time.Time `json:"at"`
	// Who took it: the signed-in dashboard user, or the OS user of the
	// command line.
	Who string `json:"who"`
	// Via is where from: "dashboard", "cli" or what a program says.
	Via string `json:"via"`
	// From is the client's address (dashboard) or the host (command line).
	From string `json:"from,omitempty"`
	// Action names what was done ("cancel", "disable", "requeue-all", …).
	Action string `json:"action"`
	// Target is what it was done to (a task id, a type, a key; may be
	// empty).
	Target string `json:"target,omitempty"`
	// OK reports success; Result says what happened or why it failed.
	OK     bool   `json:"ok"`
	Result string `json:"result"`
}

// AuditQuery selects a page of the audit log, newest first.
type AuditQuery struct {
	// Since keeps entries at or after it (zero: as far back as kept).
	Since time.Time
	// Limit is the page size: 0 means 50, at most 1000.
	Limit int
	// Continue resumes after the page that returned it.
	Continue string
}

// AuditPage is one page of the audit log.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	// Continue, when not empty, fetches the next page (AuditQuery.Continue):
	// one URL-safe word; a token AuditLog did not return is
	// ErrInvalidRunQuery.
	Continue string `json:"continue,omitempty"`
}

// Audit records e in the audit log (one request), kept for
// RunsOptions.AuditRetention (90 days by default) in the Runs table. It
// needs run records (ErrNoRunRecords without them).
func (c *Client) Audit(ctx context.Context, e AuditEntry) error {
	if c.runs == nil {
		return ErrNoRunRecords
	}
	return c.runs.Audit(ctx, runs.AuditEntry(e))
}

// AuditLog returns a page of the audit log, newest first: one query per
// page, however many days it spans.
func (c *Client) AuditLog(ctx context.Context, q AuditQuery) (AuditPage, error) {
	if c.runs == nil {
		return AuditPage{}, ErrNoRunRecords
	}
	if q.Limit == 0 {
		q.Limit = 50
	}
	if q.Limit < 1 || q.Limit > 1000 {
		return AuditPage{}, fmt.Errorf("%w: audit log limit %d: want 1 to 1000", ErrInvalidRunQuery, q.Limit)
	}
	es, next, err := c.runs.AuditLog(ctx, q.Since, q.Limit, q.Continue)
	if err != nil {
		return AuditPage{}, err
	}
	p := AuditPage{Entries: make([]AuditEntry, len(es)), Continue: next}
	for i, e := range es {
		p.Entries[i] = AuditEntry(e)
	}
	return p, nil
}
