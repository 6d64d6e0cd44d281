package queue

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzDecodeEnvelope feeds any message body to the consumer's decoder
// (JSON or base64-wrapped JSON, as SDKs of other languages write): it
// never panics, refuses with ErrMalformed, and what it accepts encodes to
// a body it decodes again to the same encoding.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":"job-1","type":"mail","due":"2026-01-02T03:04:05Z","enqueued":"2026-01-02T03:04:05Z","attempt":0}`,
		`{"v":1,"id":"s@1","series":"s","type":"report","payload":"{\"a\":1}","due":"2026-01-02T03:04:05.123456789+02:00","enqueued":"2026-01-02T03:04:05Z","attempt":3,"max_attempts":5,"recurrence":"@every 1m","seq":7,"generation":9,"last_error":"boom","marked":true,"token":"abc123def456","row":"00/0638..._s"}`,
		`{"v":2,"id":"x","type":"t"}`,
		`{"v":1,"id":"","type":"t"}`,
		`{"v":1,"id":"x"}`,
		`{"v":1,"id":"x","type":"t","due":"yesterday"}`,
		`not json`,
		``,
		`null`,
		`[]`,
		`{"v":1e400}`,
		base64.StdEncoding.EncodeToString([]byte(`{"v":1,"id":"b64","type":"t","due":"2026-01-02T03:04:05Z","enqueued":"2026-01-02T03:04:05Z","attempt":0}`)),
		"   eyJ2IjoxfQ==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		env, err := decodeBody(body)
		if err != nil {
			if !strings.Contains(err.Error(), ErrMalformed.Error()) {
				t.Fatalf("decodeBody(%q) = %v: not reported as malformed", body, err)
			}
			return
		}
		if env.ID == "" || env.Type == "" || env.V != EnvelopeVersion {
			t.Fatalf("decodeBody(%q) accepted %+v", body, env)
		}
		once, err := env.Encode()
		if err != nil {
			return // e.g. a time outside JSON's years: refused at encoding, not a crash
		}
		again, err := DecodeEnvelope(once)
		if err != nil {
			t.Fatalf("an accepted envelope re-encodes to %q, which fails: %v", once, err)
		}
		twice, err := again.Encode()
		if err != nil || twice != once {
			t.Fatalf("encoding is not stable:\n%s\n%s (%v)", once, twice, err)
		}
	})
}

// FuzzParseDeadLetter feeds any poison-queue body to the dead-letter
// reader: it never panics, and a body that is not a record is shown whole
// as an unreadable one, never lost.
func FuzzParseDeadLetter(f *testing.F) {
	for _, s := range []string{
		`{"reason":"handler failed 5 times","body":"{\"v\":1,\"id\":\"x\",\"type\":\"t\"}","type":"t","attempts":5,"at":"2026-01-02T03:04:05Z","worker":"w1"}`,
		`{"reason":"malformed message: not a JSON envelope","body":"garbage"}`,
		`{}`, `{"reason":""}`, `garbage`, ``, `{"at":"never"}`, `{"attempts":"five"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		d := parseRecord(Message{ID: "m", Text: body})
		if d.Reason == "" && d.Body == "" {
			t.Fatalf("parseRecord(%q) kept neither a reason nor the body", body)
		}
		if d.Reason == "unreadable poison record" && d.Body != body {
			t.Fatalf("an unreadable record lost its body: %q", d.Body)
		}
		_ = d.ID()
	})
}
