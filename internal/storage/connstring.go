package storage

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// DevAccountName and DevAccountKey are the well-known Azurite / storage
// emulator credentials (public, documented by Microsoft).
const (
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// ConnectionString is a parsed storage connection string.
type ConnectionString struct {
	AccountName   string
	AccountKey    string
	BlobEndpoint  string
	QueueEndpoint string
	TableEndpoint string
}

// ParseConnectionString parses the key=value;... form used by Azure Storage.
// Explicit endpoints win; otherwise they are derived from the protocol,
// account name and endpoint suffix. UseDevelopmentStorage=true means the
// local emulator on its default ports.
func ParseConnectionString(s string) (ConnectionString, error) {
	kv := map[string]string{}
	for _, part := range strings.Split(strings.TrimSpace(s), ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return ConnectionString{}, fmt.Errorf("storage connection string: segment %q is not key=value; a connection string is key=value pairs separated by semicolons, with at least AccountName and AccountKey", Redact(part))
		}
		kv[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	if strings.EqualFold(kv["usedevelopmentstorage"], "true") {
		return ConnectionString{
			AccountName:   DevAccountName,
			AccountKey:    DevAccountKey,
			BlobEndpoint:  "http://127.0.0.1:10000/" + DevAccountName,
			QueueEndpoint: "http://127.0.0.1:10001/" + DevAccountName,
			TableEndpoint: "http://127.0.0.1:10002/" + DevAccountName,
		}, nil
	}
	cs := ConnectionString{
		AccountName:   kv["accountname"],
		AccountKey:    kv["accountkey"],
		BlobEndpoint:  kv["blobendpoint"],
		QueueEndpoint: kv["queueendpoint"],
		TableEndpoint: kv["tableendpoint"],
	}
	if cs.AccountName == "" || cs.AccountKey == "" {
		if kv["sharedaccesssignature"] != "" {
			return ConnectionString{}, fmt.Errorf("storage connection string: SAS connection strings are not supported; use AccountName and AccountKey, or storage.account with Azure AD")
		}
		return ConnectionString{}, fmt.Errorf("storage connection string: AccountName and AccountKey are required (got keys: %s)", strings.Join(keys(kv), ", "))
	}
	proto := kv["defaultendpointsprotocol"]
	if proto == "" {
		proto = "https"
	}
	if proto != "https" && proto != "http" {
		return ConnectionString{}, fmt.Errorf("storage connection string: DefaultEndpointsProtocol %q: want http or https", proto)
	}
	suffix := kv["endpointsuffix"]
	if suffix == "" {
		suffix = "core.windows.net"
	}
	for _, e := range []struct {
		p   *string
		svc string
	}{{&cs.BlobEndpoint, "blob"}, {&cs.QueueEndpoint, "queue"}, {&cs.TableEndpoint, "table"}} {
		if *e.p == "" {
			*e.p = fmt.Sprintf("%s://%s.%s.%s", proto, cs.AccountName, e.svc, suffix)
		}
		u, err := url.Parse(*e.p)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return ConnectionString{}, fmt.Errorf("storage connection string: %s endpoint %q is not an http(s) URL", e.svc, *e.p)
		}
	}
	return cs, nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(AccountKey=)[^;]*`),
	regexp.MustCompile(`(?i)(SharedAccessSignature=)[^;]*`),
	regexp.MustCompile(`(?i)([?&]sig=)[^&;]*`),
}

// Redact removes account keys and SAS signatures from s, so a connection
// string or URL can be logged or printed.
func Redact(s string) string {
	for _, re := range secretPatterns {
		s = re.ReplaceAllString(s, "${1}REDACTED")
	}
	return s
}
