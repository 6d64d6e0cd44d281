package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// Every command that changes something is recorded in the audit log with
// the OS user and host, its target and its outcome — a failure too —
// while reads, counts (bulk without --yes) and refused command lines are
// not; `leasecron audit` lists
// them newest first.
func TestCommandsAreAudited(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	for _, args := range [][]string{
		{"schedule", "--id", "rep", "--type", "report", "--every", "1h"},
		{"status", "rep"},
		{"disable", "rep"},
		{"schedule", "--in", "soon", "x"},      // refused command line: not recorded
		{"bulk", "cancel", "--type", "report"}, // a count without --yes: not recorded
		{"cancel", "nosuch"},
		{"cancel", "rep"},
	} {
		run(t, "", args...)
	}
	code, out, stderr := run(t, "", "audit", "--json")
	if code != exitOK {
		t.Fatalf("audit: exit %d, %s", code, stderr)
	}
	var p struct {
		Entries []struct {
			Who, Via, From, Action, Target, Result string
			OK                                     bool
		}
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range p.Entries {
		got = append(got, e.Action+" "+e.Target)
		if e.Who != osUser() || e.Via != "cli" || e.From != hostName() {
			t.Errorf("entry %+v: want who %q via cli from %q", e, osUser(), hostName())
		}
	}
	want := []string{"cancel rep", "cancel nosuch", "disable rep", "schedule --id rep --type report --every 1h"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit log %q, want %q", got, want)
	}
	if p.Entries[1].OK || !strings.Contains(p.Entries[1].Result, "nosuch") || !p.Entries[0].OK {
		t.Errorf("outcomes: %+v", p.Entries[:2])
	}
	if code, out, _ := run(t, "", "audit"); code != exitOK || !strings.Contains(out, "WHO") || !strings.Contains(out, "failed: ") {
		t.Errorf("audit table: exit %d\n%s", code, out)
	}
	if code, _, stderr := run(t, "", "audit", "--limit", "0"); code != exitUsage || !strings.Contains(stderr, "--limit 0") {
		t.Errorf("audit --limit 0: exit %d, %s", code, stderr)
	}
}

// An audit entry names what a command acted on, never a payload (README,
// "Audit log"): a schedule's or a blackboard key's payload argument is
// left out, and a schedule given no id names the id it drew (a review
// found the payload recorded, and the drawn id not).
func TestAuditEntriesLeaveOutPayloads(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	run(t, "", "schedule", "--id", "pay1", "--type", "hello", "--in", "1h", "SECRET-card-4111")
	_, drawn, _ := run(t, "", "schedule", "--type", "hello", "--in", "1h", "SECRET-no-id")
	run(t, "", "blackboard", "add", "bbkey", "--every", "1h", "--type", "hello", "SECRET-board")
	code, out, stderr := run(t, "", "audit", "--json")
	if code != exitOK {
		t.Fatalf("audit: exit %d, %s", code, stderr)
	}
	if strings.Contains(out, "SECRET") {
		t.Errorf("the audit log holds a payload:\n%s", out)
	}
	for _, want := range []string{"--id pay1 --type hello", "(id " + strings.TrimSpace(drawn) + ")", "bbkey --type hello --every 1h"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit log without %q:\n%s", want, out)
		}
	}
}
