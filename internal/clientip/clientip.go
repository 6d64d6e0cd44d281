// Package clientip tells the address of the client that sent an HTTP
// request, for the audit log: the connection's peer, or, when the peer is
// a proxy the operator trusts, the address that proxy says it forwarded
// for (X-Forwarded-For).
package clientip

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Parse reads proxies, each an IP address or a CIDR prefix (10.0.0.0/8,
// 2001:db8::/32). An entry that is neither is named in the error.
func Parse(proxies []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(proxies))
	for _, s := range proxies {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				// Addresses are compared unmapped.
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix (such as 10.0.0.0/8 or 2001:db8::/32)", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Of returns the address of the client that sent r. Every proxy appends
// the address it received from to X-Forwarded-For, so only the entries
// the proxies in front wrote can be believed, read from the header's end;
// the rest are the client's to write.
//
// With hops > 0 (that many proxies in front, each appending), the client
// is the entry hops from the end — for a server no request reaches but
// through them (and, when trusted is given too, only for a request whose
// peer is in trusted). A request with fewer entries is the peer's.
//
// Otherwise it is the connection's peer, unless the peer is in trusted:
// then the header is read from its end, each trusted address skipped,
// and the first address not trusted is the client. When every entry is
// trusted, the first is the client (so trusting every address makes the
// header the client's to write: count hops instead); an entry that is
// not an address stops the walk at the last one believed.
func Of(r *http.Request, trusted []netip.Prefix, hops int) string {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	a, ok := addr(peer)
	fromTrusted := ok && in(a, trusted)
	var entries []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		entries = append(entries, strings.Split(h, ",")...)
	}
	if hops > 0 {
		if len(trusted) > 0 && !fromTrusted || len(entries) < hops {
			return peer
		}
		if a, ok := addr(strings.TrimSpace(entries[len(entries)-hops])); ok {
			return a.String()
		}
		return peer
	}
	if !fromTrusted {
		return peer
	}
	client := peer
	for i := len(entries) - 1; i >= 0; i-- {
		a, ok := addr(strings.TrimSpace(entries[i]))
		if !ok {
			break
		}
		client = a.String()
		if !in(a, trusted) {
			break
		}
	}
	return client
}

// addr parses an address as a forwarding header may give it: bare, with
// a port, or bracketed.
func addr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

func in(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.WithZone("") // (a prefix contains no address with a zone)
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
