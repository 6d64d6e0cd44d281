package clientip

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestOfBelievesOnlyWhatTrustedProxiesForwarded(t *testing.T) {
	trusted, err := Parse([]string{"10.0.0.0/8", "192.168.1.7", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy trusted: the peer, whatever it claims", "203.0.113.9:5000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"through one trusted proxy", "10.1.2.3:443", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a client's own forged entry is left of the proxy's", "10.1.2.3:443", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted hops, two headers", "192.168.1.7:80", []string{"198.51.100.1", "10.9.9.9"}, "198.51.100.1"},
		{"an entry with a port", "10.1.2.3:443", []string{"198.51.100.1:61234"}, "198.51.100.1"},
		{"IPv6 through an IPv6 proxy", "[fd00::1]:443", []string{"2001:db8::5"}, "2001:db8::5"},
		{"every entry trusted: the first", "10.1.2.3:443", []string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"garbage stops the walk at the last believed", "10.1.2.3:443", []string{"nonsense, 10.0.0.2"}, "10.0.0.2"},
		{"a trusted peer without the header", "10.1.2.3:443", nil, "10.1.2.3"},
		{"an IPv4-mapped peer", "[::ffff:10.1.2.3]:443", []string{"198.51.100.1"}, "198.51.100.1"},
		{"a peer with a zone", "[fd00::1%eth0]:443", []string{"198.51.100.1"}, "198.51.100.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for _, h := range c.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := Of(r, trusted, 0); got != c.want {
				t.Errorf("Of = %q, want %q", got, c.want)
			}
		})
	}
}

// Counting the proxies in front believes exactly the entries they wrote,
// whatever the client put before them — which trusting every address
// could not tell (a review's find: with 0.0.0.0/0 trusted, a client's
// own first entry was taken).
func TestOfCountsTheProxiesInFront(t *testing.T) {
	everyone, _ := Parse([]string{"0.0.0.0/0", "::/0"})
	lb, _ := Parse([]string{"10.0.0.0/8"})
	for _, c := range []struct {
		name, peer string
		trusted    []netip.Prefix
		hops       int
		xff        string
		want       string
	}{
		{"trusting everyone takes the client's own entry", "10.1.2.3:443", everyone, 0, "8.8.8.8, 198.51.100.1", "8.8.8.8"},
		{"one proxy: the last entry", "10.1.2.3:443", nil, 1, "8.8.8.8, 198.51.100.1", "198.51.100.1"},
		{"two proxies: the second from the end", "10.1.2.3:443", nil, 2, "8.8.8.8, 198.51.100.1, 10.9.9.9", "198.51.100.1"},
		{"fewer entries than proxies: the peer", "10.1.2.3:443", nil, 2, "198.51.100.1", "10.1.2.3"},
		{"counted behind a trusted peer", "10.1.2.3:443", lb, 1, "8.8.8.8, 198.51.100.1", "198.51.100.1"},
		{"counted, but the peer not trusted: the peer", "203.0.113.9:443", lb, 1, "198.51.100.1", "203.0.113.9"},
		{"the counted entry not an address: the peer", "10.1.2.3:443", nil, 1, "8.8.8.8, unknown", "10.1.2.3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			r.Header.Set("X-Forwarded-For", c.xff)
			if got := Of(r, c.trusted, c.hops); got != c.want {
				t.Errorf("Of = %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseNamesTheBadEntry(t *testing.T) {
	_, err := Parse([]string{"10.0.0.0/8", "10.0.0.0/33"})
	if err == nil || !strings.Contains(err.Error(), `"10.0.0.0/33"`) || !strings.Contains(err.Error(), "CIDR") {
		t.Fatalf("Parse = %v; want the bad entry named with what is accepted", err)
	}
	if p, err := Parse([]string{" 10.1.2.3/8 ", "::ffff:10.0.0.0/104"}); err != nil || p[0].String() != "10.0.0.0/8" || p[1].String() != "10.0.0.0/8" {
		t.Fatalf("Parse = %v, %v; want the prefixes masked, the mapped one unmapped", p, err)
	}
}
