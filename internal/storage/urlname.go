package storage

import (
	"fmt"
	"net/url"
	"path"
	"strings"
)

// NameFromURL returns the resource name a client's URL ends in — the
// container of a container client, the queue of a queue client (both
// https://{account}.{service}.core.windows.net/{name} and Azurite's
// http://host:port/{account}/{name}) — checked with validate, so that a bad
// name is refused before any request. The URL in an error is redacted.
func NameFromURL(rawURL string, validate func(string) error) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", Redact(rawURL), err)
	}
	name := path.Base(strings.TrimSuffix(u.Path, "/"))
	if err := validate(name); err != nil {
		return "", fmt.Errorf("URL %q: %w", Redact(rawURL), err)
	}
	return name, nil
}
