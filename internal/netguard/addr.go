package netguard

import "net/netip"

// nonPublic4 are the IPv4 special-purpose ranges (RFC 6890 and the IANA
// registry) that are not globally reachable, plus cloud metadata addresses
// that are.
var nonPublic4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),         // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),      // CGNAT (RFC 6598); Alibaba metadata 100.100.100.200
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local; AWS/GCP/Azure metadata 169.254.169.254
	netip.MustParsePrefix("172.16.0.0/12"),      // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments; Oracle metadata 192.0.0.192
	netip.MustParsePrefix("192.0.2.0/24"),       // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),     // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("192.168.0.0/16"),     // RFC 1918
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"),    // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),     // TEST-NET-3
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, broadcast 255.255.255.255
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure wireserver (public address, host-only)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba metadata (inside CGNAT, listed for clarity)
}

var (
	global6 = netip.MustParsePrefix("2000::/3") // the only IPv6 global unicast space allocated
	// nonPublic6 are ranges inside 2000::/3 that are not plain global unicast.
	nonPublic6 = []netip.Prefix{
		netip.MustParsePrefix("2001::/32"),     // Teredo: refused whatever it embeds
		netip.MustParsePrefix("2001:2::/48"),   // benchmarking
		netip.MustParsePrefix("2001:10::/28"),  // ORCHID
		netip.MustParsePrefix("2001:20::/28"),  // ORCHIDv2
		netip.MustParsePrefix("2001:db8::/32"), // documentation
		netip.MustParsePrefix("3fff::/20"),     // documentation (RFC 9637)
	}
	sixToFour = netip.MustParsePrefix("2002::/16")    // 6to4: v4 in bits 16-47
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // NAT64 well-known prefix: v4 in the low 32 bits
	nat64Any  = netip.MustParsePrefix("64:ff9b::/32") // includes 64:ff9b:1::/48, local-use NAT64
)

// IsPublic reports whether a is a globally reachable unicast address that a
// push endpoint may resolve to. IPv4-mapped IPv6 addresses are judged by their
// IPv4 address; 6to4 and NAT64 (64:ff9b::/96) by the IPv4 address they
// embed. Zoned addresses are never public.
func IsPublic(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	if a.Is4() {
		for _, p := range nonPublic4 {
			if p.Contains(a) {
				return false
			}
		}
		return true
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return IsPublic(netip.AddrFrom4([4]byte(b[12:16])))
	case nat64Any.Contains(a):
		return false
	case sixToFour.Contains(a):
		return IsPublic(netip.AddrFrom4([4]byte(b[2:6])))
	case !global6.Contains(a):
		// Loopback, unspecified, IPv4-compatible, ULA fc00::/7 (AWS
		// metadata fd00:ec2::254), link-local, site-local, multicast,
		// discard-only and everything unallocated.
		return false
	}
	for _, p := range nonPublic6 {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
