package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/internal/storage"
)

const secretConn = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + storage.DevAccountKey + ";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"

type config struct {
	Name string
	Conn string
}

func TestLoggerRedactsConnectionStrings(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger(&buf, "debug", format)
			if err != nil {
				t.Fatal(err)
			}
			log = log.With("startup_conn", secretConn)
			log.WithGroup("storage").Info("connecting with "+secretConn,
				"connection_string", secretConn,
				"err", fmt.Errorf("dial: %s: refused", secretConn),
				"config", config{Name: "x", Conn: secretConn},
				slog.Group("nested", "conn", secretConn),
				"blob_url", "https://acct.blob.core.windows.net/c/b?sv=2024&sig=abcdef123",
				"kept", "plain value",
			)
			out := buf.String()
			if strings.Contains(out, storage.DevAccountKey) || strings.Contains(out, "abcdef123") {
				t.Fatalf("%s output leaks a secret:\n%s", format, out)
			}
			if n := strings.Count(out, "AccountKey=REDACTED"); n != 6 {
				t.Errorf("%s: %d redacted keys, want 6 (message, With, attr, error, struct, group):\n%s", format, n, out)
			}
			if !strings.Contains(out, "sig=REDACTED") || !strings.Contains(out, "plain value") {
				t.Errorf("%s output:\n%s", format, out)
			}
		})
	}
}

func TestLoggerFormatAndLevel(t *testing.T) {
	var buf bytes.Buffer
	// A bytes.Buffer is not a terminal: auto means JSON.
	log, err := NewLogger(&buf, "warn", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", "n", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("auto format on a buffer is not JSON: %v\n%s", err, buf.String())
	}
	if rec["msg"] != "kept" || rec["level"] != "WARN" || rec["n"] != float64(1) {
		t.Fatalf("record %v", rec)
	}

	buf.Reset()
	log, err = NewLogger(&buf, "", "text")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=INFO msg=shown") {
		t.Fatalf("text output %q", out)
	}

	for _, c := range [][2]string{{"loud", ""}, {"info", "xml"}} {
		if _, err := NewLogger(&buf, c[0], c[1]); err == nil {
			t.Errorf("NewLogger(level %q, format %q) accepted", c[0], c[1])
		}
	}
}

func TestRedactingHandlerKeepsNonSecretValues(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(RedactingHandler(slog.NewJSONHandler(&buf, nil)))
	log.Info("m", "err", errors.New("plain failure"), "n", 3, "list", []int{1, 2})
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["err"] != "plain failure" || rec["n"] != float64(3) || fmt.Sprint(rec["list"]) != "[1 2]" {
		t.Fatalf("values changed: %v", rec)
	}
}
