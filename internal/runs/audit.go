package runs

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
)

// The audit log: one row per action taken from the dashboard or the
// command line, in partition "~a{99999999 − yyyymmdd}" (a day, newest day
// first) with RowKey {inverted ticks}-{random} (newest first within the
// day), so that one range query over the partitions reads the log newest
// first however many days it spans. Clean removes the days older than
// Options.AuditRetention.
const (
	auditPrefix = "~a"
	auditEnd    = "~b" // sorts after every "~a…" partition
	// DefaultAuditRetention is how long audit entries are kept.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// MaxAuditField bounds each text field of an entry.
	MaxAuditField = 1024
)

// AuditEntry is one action recorded in the audit log.
type AuditEntry struct {
	// At is when the action was taken (the recorder's clock).
	At time.Time
	// Who took it: the signed-in dashboard user, or the OS user for the
	// command line.
	Who string
	// Via is where from: "dashboard" or "cli".
	Via string
	// From is the client address (dashboard) or the host (command line).
	From string
	// Action names what was done ("cancel", "requeue-all", …).
	Action string
	// Target is what it was done to (a task id, a type, a key; may be
	// empty).
	Target string
	// OK reports success; Result says what happened or why it failed.
	OK     bool
	Result string
}

func auditPartition(t time.Time) string {
	day, _ := strconv.Atoi(t.UTC().Format("20060102"))
	return fmt.Sprintf("%s%08d", auditPrefix, 99999999-day)
}

// Audit records e (one request).
func (s *Store) Audit(ctx context.Context, e AuditEntry) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if e.At.IsZero() {
		e.At = s.now()
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	props := table.Props{"At": e.At.UTC(), "Who": trunc.Head(e.Who, MaxAuditField), "Via": trunc.Head(e.Via, MaxAuditField),
		"From": trunc.Head(e.From, MaxAuditField), "Action": trunc.Head(e.Action, MaxAuditField), "Target": trunc.Head(e.Target, MaxAuditField),
		"OK": e.OK, "Result": trunc.Head(e.Result, MaxAuditField)}
	op := table.Op{Kind: table.Insert, PartitionKey: auditPartition(e.At), RowKey: inverted(e.At) + "-" + hex.EncodeToString(b), Props: props}
	if err := submit(ctx, s.t, []table.Op{op}); err != nil {
		return fmt.Errorf("runs: audit: %w", err)
	}
	return nil
}

// AuditLog returns up to limit entries newest first, from since on (zero:
// as far back as kept), and a token for the next page: one query per page.
// A token this method did not return is ErrBadContinue.
func (s *Store) AuditLog(ctx context.Context, since time.Time, limit int, tok string) ([]AuditEntry, string, error) {
	cont, err := auditTokenIn(tok)
	if err != nil {
		return nil, "", err
	}
	if err := s.ensure(ctx); err != nil {
		return nil, "", err
	}
	es, next, err := s.auditPage(ctx, since, limit, cont)
	return es, auditTokenOut(next), err
}

// auditTokenOut is the token of an audit page as callers see it: the
// table's continuation (the next partition and row, joined by a newline)
// in base64url, one word that goes into a flag, a URL or JSON unquoted.
func auditTokenOut(cont string) string {
	if cont == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cont))
}

// auditTokenIn reads a token auditTokenOut made, or the table's own
// continuation as releases before the fortieth session returned it
// (newline and all), so that a page in hand across an upgrade still
// continues. (The service's halves of a token are its own opaque words,
// so what they name is not checked here.)
func auditTokenIn(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	cont := tok
	if !strings.Contains(tok, "\n") {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(tok))
		if err != nil {
			cont = ""
		} else {
			cont = string(b)
		}
	}
	if table.CheckContinuation(cont) != nil {
		return "", fmt.Errorf("%w %q was not returned by an audit log page; want the one the previous page gave", ErrBadContinue, trunc.Head(tok, 200))
	}
	return cont, nil
}

// auditPage is AuditLog with the table's continuation.
func (s *Store) auditPage(ctx context.Context, since time.Time, limit int, cont string) ([]AuditEntry, string, error) {
	q := table.Query{PartitionFrom: auditPartition(s.now()), PartitionTo: auditEnd, Top: limit, Continuation: cont}
	if !since.IsZero() {
		q.PartitionTo = auditPartition(since) + "~"
		q.Where = []table.Cond{{Prop: "At", Op: table.Ge, Value: since.UTC()}}
	}
	var out []AuditEntry
	for {
		p, err := s.t.Query(ctx, q)
		if err != nil {
			return nil, "", fmt.Errorf("runs: audit log: %w", err)
		}
		for _, rw := range p.Entities {
			out = append(out, AuditEntry{At: rw.Props.Time("At"), Who: rw.Props.Str("Who"), Via: rw.Props.Str("Via"), From: rw.Props.Str("From"),
				Action: rw.Props.Str("Action"), Target: rw.Props.Str("Target"), OK: rw.Props.Bool("OK"), Result: rw.Props.Str("Result")})
		}
		if p.Continuation == "" || len(out) >= limit {
			return out, p.Continuation, nil
		}
		q.Continuation, q.Top = p.Continuation, limit-len(out)
	}
}

// cleanAudit deletes the audit days older than cutoff's.
func (s *Store) cleanAudit(ctx context.Context, cutoff time.Time) (int, error) {
	old, err := table.All(ctx, s.t, table.Query{PartitionFrom: auditPartition(cutoff) + "~", PartitionTo: auditEnd, Select: []string{"At"}}, 0)
	if err != nil {
		return 0, fmt.Errorf("runs: clean audit log: %w", err)
	}
	return s.deleteRows(ctx, old), nil
}
