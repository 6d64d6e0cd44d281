package storage_test

import (
	"strings"
	"testing"

	"github.com/leasecron/leasecron/internal/storage"
)

// FuzzParseConnectionString: any text given as a connection string is
// parsed or refused, never a panic, and the refusal never repeats an
// account key.
func FuzzParseConnectionString(f *testing.F) {
	for _, s := range []string{
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
		"UseDevelopmentStorage=true",
		"AccountName=a;AccountKey=a2V5;QueueEndpoint=http://127.0.0.1:9/a",
		"AccountName=a", "AccountKey=c2VjcmV0", "BlobEndpoint=https://x.blob.core.windows.net;SharedAccessSignature=sv=2020&sig=c2VjcmV0",
		"=;=;", ";;;", "AccountName=a;AccountKey=not base64!", "", "garbage",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := storage.ParseConnectionString(s)
		if err == nil {
			return
		}
		for _, kv := range strings.Split(s, ";") {
			k, v, ok := strings.Cut(kv, "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "AccountKey") && len(v) >= 8 && strings.Contains(err.Error(), v) {
				t.Fatalf("the refusal of %q repeats the account key: %v", s, err)
			}
		}
	})
}
