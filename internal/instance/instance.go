// Package instance makes the one default identity of a leasecron process:
// the name a worker gives itself in the lease blob, run records, counters,
// the blackboard and logs when none is configured (worker.instance_id).
package instance

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
)

// maxHost bounds the host part, so an id stays short in logs and keys.
const maxHost = 40

// NewID returns "{hostname}-{pid}-{8 random hex digits}": unique per process
// even when several share a host name (containers), and usable everywhere
// an instance id goes — a table key, a blob metadata value, an HTTP header.
// Characters of the host name outside A-Z a-z 0-9 . _ - become '_'.
func NewID() string {
	return id(hostname(), os.Getpid())
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

func id(host string, pid int) string {
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, host)
	if len(host) > maxHost {
		host = host[:maxHost]
	}
	if host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(pid) + "-" + hex.EncodeToString(b[:])
}
