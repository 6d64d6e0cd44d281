package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron/cmd/leasecron/internal/config"
	"github.com/leasecron/leasecron/leasecrontype"
)

func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), "test", args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// Bad input is refused before anything touches storage: these run without
// any storage account configured.
func TestBadInputIsRefusedWithExitCode2(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "--at", "tomorrow", "x"}, `"tomorrow" is not RFC 3339`},
		{[]string{"schedule", "--in", "soon", "x"}, "soon"},
		{[]string{"schedule", "--at", "2026-01-01T00:00:00Z", "--in", "1m", "x"}, "not both"},
		{[]string{"schedule", "--cron", "61 * * * *"}, "61"},
		{[]string{"schedule", "--cron", "* * * *"}, "cron"},
		{[]string{"schedule", "--every", "0s"}, "every"},
		{[]string{"schedule", "--every", "1m", "--cron", "@hourly"}, "not both"},
		{[]string{"schedule", "--tz", "Mars/Olympus", "--cron", "@daily"}, "Mars/Olympus"},
		{[]string{"schedule", "--tz", "UTC", "x"}, "--tz applies to --cron"},
		{[]string{"reschedule", "x"}, "--at or --in"},
		{[]string{"schedule", "--no-such-flag"}, "unknown flag"},
		{[]string{"deadletter", "requeue"}, "ID or --all"},
		{[]string{"aggregator", "add", "k", "--type", "t"}, "--every is required"},
		{[]string{"blackboard", "add", "k", "--every", "1h", "--type", "Bad Type"}, "Bad Type"},
		{[]string{"dashboard", "--addr", ":8090"}, `":8090" is not loopback`},
		{[]string{"dashboard", "--addr", "0.0.0.0:8090"}, "dashboard.auth"},
		{[]string{"dashboard", "--addr", "nonsense"}, `"nonsense"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := run(t, "", tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr %q does not mention %q", stderr, tc.want)
			}
		})
	}
}

func TestDashboardBasePathIsChecked(t *testing.T) {
	t.Setenv("LEASECRON_DASHBOARD_BASE_PATH", "leasecron")
	code, _, stderr := run(t, "", "dashboard")
	// A bad configuration exits 1, as every configuration error does.
	if code != exitError || !strings.Contains(stderr, `dashboard.base_path: "leasecron": it must start with /`) {
		t.Fatalf("exit %d stderr %q, want %d naming the bad dashboard.base_path", code, stderr, exitError)
	}
}

func TestDashboardAuthIsCheckedWithoutEchoingIt(t *testing.T) {
	t.Setenv("LEASECRON_DASHBOARD_AUTH", "hunter2")
	code, _, stderr := run(t, "", "dashboard", "--addr", ":8090")
	if code != exitUsage || !strings.Contains(stderr, "basic:USER:PASSWORD or bearer:TOKEN") || strings.Contains(stderr, "hunter2") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	// Read-only and anonymous on purpose: allowed past the address check
	// (and then fails for want of a storage account).
	t.Setenv("LEASECRON_DASHBOARD_AUTH", "")
	t.Setenv("LEASECRON_DASHBOARD_READ_ONLY", "true")
	t.Setenv("LEASECRON_DASHBOARD_ALLOW_ANONYMOUS", "true")
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	if code, _, stderr := run(t, "", "dashboard", "--addr", ":8090"); code == exitUsage || strings.Contains(stderr, "loopback") {
		t.Fatalf("read-only anonymous refused: exit %d stderr %q", code, stderr)
	}
}

func TestOversizePayloadFromStdin(t *testing.T) {
	t.Setenv("LEASECRON_PAYLOAD_MAX_SIZE", "16")
	code, _, stderr := run(t, strings.Repeat("x", 17), "schedule", "-")
	if code != exitUsage || !strings.Contains(stderr, "payload.max_size") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("lease:\n  duration: 5m\nworkr:\n  concurrency: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "", "--config", file, "config")
	if code != exitError || !strings.Contains(stderr, "lease.duration") || !strings.Contains(stderr, `unknown key "workr.concurrency"`) {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestNoStorageConfigured(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	code, _, stderr := run(t, "", "list")
	if code != exitError || !strings.Contains(stderr, "storage.connection_string") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestBadConnectionStringIsRedacted(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "AccountName=x;AccountKey=c2VjcmV0c2VjcmV0;Bogus")
	code, _, stderr := run(t, "", "list")
	if code == 0 || strings.Contains(stderr, "c2VjcmV0c2VjcmV0") {
		t.Fatalf("exit %d, stderr must not contain the key: %q", code, stderr)
	}
}

func TestConfigShowsEffectiveRedacted(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "AccountName=x;AccountKey=c2VjcmV0c2VjcmV0")
	t.Setenv("LEASECRON_WORKER_CONCURRENCY", "3")
	code, out, stderr := run(t, "", "config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(out, "c2VjcmV0c2VjcmV0") || !strings.Contains(out, "REDACTED") || !strings.Contains(out, "concurrency: 3") {
		t.Fatalf("config output:\n%s", out)
	}
	code, out, _ = run(t, "", "config", "--keys", "--markdown")
	if code != 0 || !strings.Contains(out, "| `lease.duration` | `60s` |") {
		t.Fatalf("markdown keys:\n%s", out)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != 0 || strings.TrimSpace(out) != "leasecron test" {
		t.Fatalf("exit %d out %q", code, out)
	}
}

// The README documents every configuration key and every command.
func TestReadmeDocumentsEveryKeyAndCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, k := range config.Keys {
		if !strings.Contains(readme, "`"+k.Name+"`") {
			t.Errorf("README does not document config key %s", k.Name)
		}
	}
	root := NewRoot("test", strings.NewReader(""), io.Discard, io.Discard)
	var walk func(c *cobra.Command, prefix string)
	walk = func(c *cobra.Command, prefix string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			name := strings.TrimSpace(prefix + " " + sub.Name())
			if !strings.Contains(readme, "`leasecron "+name) {
				t.Errorf("README does not document `leasecron %s`", name)
			}
			walk(sub, name)
		}
	}
	walk(root, "")
}

func TestCondenseSDKErrors(t *testing.T) {
	dump := "list: not found: GET http://h/t()\n--------------------------------------------------------------------------------\nRESPONSE 404: 404 Not Found\nERROR CODE: TableNotFound\n--------------------------------------------------------------------------------\n{\"odata.error\":{}}\n"
	if got := condense(dump); got != "list: not found: GET http://h/t() (error code TableNotFound)" {
		t.Errorf("condense = %q", got)
	}
	if got := condense("plain\nmulti-line config error"); got != "plain\nmulti-line config error" {
		t.Errorf("non-SDK message changed: %q", got)
	}
}

// The log handler shortens long payloads without cutting a character in
// half (it used to cut at byte 200).
func TestLogHandlerKeepsUTF8(t *testing.T) {
	var out bytes.Buffer
	h := logHandler(slog.New(slog.DiscardHandler))
	ctx := leasecrontype.WithOutputWriter(context.Background(), &out)
	if err := h(ctx, leasecrontype.Task{ID: "t", Type: "log", Payload: []byte("x" + strings.Repeat("é", 150))}); err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(out.String()) || len(out.String()) > 201 {
		t.Fatalf("output %q (%d bytes): want at most 200 bytes of valid UTF-8 and a newline", out.String(), len(out.String()))
	}
}

// TestEveryCommandsBadUsageExits2 walks the whole command tree: for every
// command, an unknown flag and every argument count up to three that its
// argument check refuses exit 2 with the message and a usage line.
func TestEveryCommandsBadUsageExits2(t *testing.T) {
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	var walk func(c *cobra.Command, path []string)
	n := 0
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
		bad := [][]string{{"--no-such-flag"}}
		for k := range 4 {
			args := slices.Repeat([]string{"x"}, k)
			if c.Args != nil && c.Args(c, args) != nil {
				bad = append(bad, args)
			}
		}
		for _, args := range bad {
			argv := append(slices.Clone(path), args...)
			n++
			t.Run(strings.Join(argv, " "), func(t *testing.T) {
				code, _, stderr := run(t, "", argv...)
				if code != exitUsage {
					t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr)
				}
				if !strings.Contains(stderr, "Usage: leasecron") || !strings.HasPrefix(stderr, "leasecron: ") {
					t.Fatalf("stderr %q: want the error and a usage line", stderr)
				}
			})
		}
	}
	walk(NewRoot("test", strings.NewReader(""), io.Discard, io.Discard), nil)
	if n < 40 {
		t.Fatalf("only %d bad usages tried: the command tree was not walked", n)
	}
}
