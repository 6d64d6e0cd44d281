package storage

import (
	"fmt"
	"regexp"
	"unicode/utf8"
)

var (
	tableNameRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{2,62}$`)
	queueNameRE     = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)
	containerNameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)
	accountNameRE   = regexp.MustCompile(`^[a-z0-9]{3,24}$`)
)

// ValidateTableName checks an Azure table name: 3–63 letters and digits,
// starting with a letter.
func ValidateTableName(name string) error {
	if !tableNameRE.MatchString(name) {
		return fmt.Errorf("%w: table name %q: must be 3-63 letters or digits and start with a letter", ErrInvalidName, name)
	}
	return nil
}

// ValidateQueueName checks an Azure queue name: 3–63 lower-case letters,
// digits and single hyphens, starting and ending with a letter or digit.
func ValidateQueueName(name string) error {
	if !queueNameRE.MatchString(name) || len(name) > 63 {
		return fmt.Errorf("%w: queue name %q: must be 3-63 lower-case letters, digits or single hyphens, starting and ending with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// ValidateContainerName checks a blob container name (same rules as queues).
func ValidateContainerName(name string) error {
	if !containerNameRE.MatchString(name) || len(name) > 63 {
		return fmt.Errorf("%w: container name %q: must be 3-63 lower-case letters, digits or single hyphens, starting and ending with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// ValidateAccountName checks a storage account name: 3–24 lower-case letters and digits.
func ValidateAccountName(name string) error {
	if !accountNameRE.MatchString(name) {
		return fmt.Errorf("%w: storage account %q: must be 3-24 lower-case letters or digits", ErrInvalidName, name)
	}
	return nil
}

// MaxKeyLen is the largest PartitionKey or RowKey, in bytes, that leasecron
// accepts (the service allows 1 KiB).
const MaxKeyLen = 1024

// ValidateKeyPart checks a string that becomes part of a PartitionKey or
// RowKey: non-empty, at most MaxKeyLen bytes, valid UTF-8, and free of the
// characters the Table service forbids in keys (/ \ # ?) and of control
// characters.
func ValidateKeyPart(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidName, what)
	}
	if len(s) > MaxKeyLen {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrInvalidName, what, len(s), MaxKeyLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidName, what, s)
	}
	for _, r := range s {
		switch {
		case r == '/' || r == '\\' || r == '#' || r == '?':
			return fmt.Errorf("%w: %s %q contains %q; table keys may not contain / \\ # or ?", ErrInvalidName, what, s, r)
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return fmt.Errorf("%w: %s %q contains control character U+%04X", ErrInvalidName, what, s, r)
		}
	}
	return nil
}

// ErrInvalidName is wrapped by every name and key validation error.
var ErrInvalidName = fmt.Errorf("invalid name")
