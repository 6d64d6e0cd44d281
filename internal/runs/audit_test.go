package runs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The audit log reads newest first across days in one query per page,
// pages with a token, filters by a start time, and Clean removes the days
// past AuditRetention and nothing younger.
func audit(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	start := e.now()
	for i := range 6 {
		at := start.Add(-time.Duration(i) * 20 * time.Hour) // over five days
		if err := s.Audit(ctx, AuditEntry{At: at, Who: "alice", Via: "cli", From: "host", Action: "cancel", Target: fmt.Sprintf("t%d", i), OK: true, Result: "cancelled"}); err != nil {
			t.Fatal(err)
		}
	}
	var got []AuditEntry
	e.wantCost(t, "a page of the audit log", 1, func() {
		var err error
		if got, _, err = s.AuditLog(ctx, time.Time{}, 100, ""); err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != 6 {
		t.Fatalf("audit log: %d entries, want 6", len(got))
	}
	for i, a := range got {
		if a.Target != fmt.Sprintf("t%d", i) || a.Who != "alice" || a.Via != "cli" || !a.OK || a.Result != "cancelled" {
			t.Fatalf("entry %d: %+v, want t%d newest first", i, a, i)
		}
	}
	page, next, err := s.AuditLog(ctx, time.Time{}, 4, "")
	if err != nil || len(page) != 4 || next == "" {
		t.Fatalf("first page of 4: %d entries, token %q, %v", len(page), next, err)
	}
	// The token is one word for a flag, a URL or JSON; a page in hand
	// from an earlier release (the table's own token, newline and all)
	// still continues; anything else is refused before storage is asked.
	if strings.ContainsAny(next, "\n ~&?/") {
		t.Fatalf("token %q is not one URL-safe word", next)
	}
	old, err := base64.RawURLEncoding.DecodeString(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{next, string(old)} {
		rest, last, err := s.AuditLog(ctx, time.Time{}, 4, tok)
		if err != nil || len(rest) != 2 || rest[0].Target != "t4" || last != "" {
			t.Fatalf("second page from %q: %+v, %q, %v", tok, rest, last, err)
		}
	}
	for _, bad := range []string{"garbage", base64.RawURLEncoding.EncodeToString([]byte("no newline")), "two\nlines\nmore"} {
		e.wantCost(t, "a refused token", 0, func() {
			if _, _, err := s.AuditLog(ctx, time.Time{}, 4, bad); !errors.Is(err, ErrBadContinue) || !strings.Contains(err.Error(), "audit log page") {
				t.Errorf("token %q: %v; want ErrBadContinue", bad, err)
			}
		})
	}
	recent, _, err := s.AuditLog(ctx, start.Add(-30*time.Hour), 100, "")
	if err != nil || len(recent) != 2 {
		t.Fatalf("since 30 hours ago: %+v, %v; want t0 and t1", recent, err)
	}
	if e.advance == nil {
		return
	}
	e.advance(DefaultAuditRetention - 48*time.Hour) // the oldest days are now past
	st, err := s.Clean(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left, _, err := s.AuditLog(ctx, time.Time{}, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.Audit == 0 || len(left)+st.Audit != 6 || len(left) < 2 {
		t.Fatalf("Clean removed %d audit entries, %d left: %+v", st.Audit, len(left), left)
	}
}

func TestMemAudit(t *testing.T) { audit(t, memEnv(t)) }

func TestStoreAudit(t *testing.T) {
	t.Parallel()
	audit(t, azureEnv(t, Options{}))
}
