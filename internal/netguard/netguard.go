// Package netguard owns the SSRF policy for push endpoints: which URLs the
// processor may send to (CheckEndpoint, at validation time) and which
// addresses it may connect to (Control and DialContext, at dial time, the
// defence against DNS rebinding).
//
// An endpoint must be https, on an allowed port (443 by default), to a public
// DNS name or public IP address. Loopback, private, link-local, CGNAT,
// metadata and other special-purpose addresses are refused, as are names that
// can only resolve locally (localhost, *.local, *.internal, dotless names) and
// numeric hosts that are not canonical IPv4 (2130706433, 0x7f.1, 127.1).
// The only way to reach a local server (the push simulator, tests) is an
// explicit AllowInsecure host:port.
//
// The package must not log, and its errors never contain the endpoint's path
// or userinfo: a push endpoint URL is a secret capability.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// MaxEndpointLen is the longest endpoint URL CheckEndpoint accepts, in bytes.
// Real push endpoints are a few hundred bytes.
const MaxEndpointLen = 4096

// BlockedError reports an endpoint or address refused by a Policy. Reason
// names the cause and may include the host, never the URL path or userinfo.
type BlockedError struct {
	Reason string
}

func (e *BlockedError) Error() string { return "endpoint blocked: " + e.Reason }

func blocked(format string, args ...any) *BlockedError {
	return &BlockedError{Reason: fmt.Sprintf(format, args...)}
}

// LookupFunc resolves a host name to addresses. It is the hook DialContext
// resolves with; see WithLookup.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// Option configures a Policy built by New.
type Option func(*cfg)

type cfg struct {
	insecure []string
	hosts    []string
	ports    []int
	lookup   LookupFunc
}

// AllowInsecure lets the given host:port pairs be reached over http and on
// loopback or private addresses. It is the only way to reach a local
// simulator. Entries must carry an explicit port ("127.0.0.1:8080",
// "[::1]:8080", "localhost:8080", "pushsim:8080"). Repeated calls add to the
// list. Default: none.
//
// At dial time Control only sees IP:port, so it honours entries whose host is
// an IP literal or "localhost" (127.0.0.1 and ::1); DialContext also honours
// named entries, because it resolves the name itself.
func AllowInsecure(hostports ...string) Option {
	return func(c *cfg) { c.insecure = append(c.insecure, hostports...) }
}

// AllowHosts turns on strict mode: only endpoints whose host equals one of the
// patterns, or is a subdomain of a "*.suffix" pattern, are accepted (IP
// literals never are). Repeated calls add to the list. Default: none, which
// means any public DNS name or public IP. DefaultPushHosts lists the real push
// services.
func AllowHosts(patterns ...string) Option {
	return func(c *cfg) { c.hosts = append(c.hosts, patterns...) }
}

// AllowPorts sets the ports endpoints may use (AllowInsecure entries are
// exempt). Repeated calls add to the list. Default: 443 only.
func AllowPorts(ports ...int) Option {
	return func(c *cfg) { c.ports = append(c.ports, ports...) }
}

// WithLookup sets how DialContext resolves host names. Default: the dialer's
// Resolver, or net.DefaultResolver.
func WithLookup(fn LookupFunc) Option {
	return func(c *cfg) { c.lookup = fn }
}

// DefaultPushHosts returns the host patterns of the public Web Push services,
// for AllowHosts:
//
//   - fcm.googleapis.com: Firebase Cloud Messaging (Chrome, Edge on Android,
//     Samsung Internet, Opera, Brave and other Chromium browsers)
//   - android.googleapis.com: the legacy GCM endpoint still found in old
//     subscriptions
//   - updates.push.services.mozilla.com, push.services.mozilla.com and
//     *.push.services.mozilla.com: Mozilla autopush (Firefox)
//   - *.push.apple.com: Apple (Safari on macOS and iOS, web.push.apple.com)
//   - *.notify.windows.com: Windows Push Notification Services (Edge on
//     Windows, wns2-*.notify.windows.com)
//
// It returns a new slice on every call.
func DefaultPushHosts() []string {
	return []string{
		"fcm.googleapis.com",
		"android.googleapis.com",
		"updates.push.services.mozilla.com",
		"push.services.mozilla.com",
		"*.push.services.mozilla.com",
		"*.push.apple.com",
		"*.notify.windows.com",
	}
}

// Policy decides which push endpoints and dial addresses are allowed. Build
// it with New; it is safe for concurrent use and immutable.
type Policy struct {
	// insecure holds AllowInsecure entries as canonical "host:port".
	insecure map[string]bool
	// insecureAddrs holds the entries Control can check: IP literals and
	// localhost, resolved.
	insecureAddrs map[netip.AddrPort]bool
	exact         map[string]bool // strict mode: exact host names
	suffixes      []string        // strict mode: ".push.apple.com" for "*.push.apple.com"
	strict        bool
	ports         map[uint16]bool
	lookup        LookupFunc
}

// New builds a Policy. It fails on a malformed option value, naming it.
func New(opts ...Option) (*Policy, error) {
	var c cfg
	for _, o := range opts {
		o(&c)
	}
	p := &Policy{
		insecure:      make(map[string]bool),
		insecureAddrs: make(map[netip.AddrPort]bool),
		exact:         make(map[string]bool),
		ports:         make(map[uint16]bool),
		lookup:        c.lookup,
	}
	for _, hp := range c.insecure {
		host, port, err := splitHostPort(hp)
		if err != nil {
			return nil, fmt.Errorf("allow-insecure entry %q: %w", hp, err)
		}
		key, addr, ok := canonicalHost(host)
		if !ok {
			return nil, fmt.Errorf("allow-insecure entry %q: invalid host", hp)
		}
		p.insecure[joinKey(key, port)] = true
		switch {
		case addr.IsValid():
			p.insecureAddrs[netip.AddrPortFrom(addr, port)] = true
		case key == "localhost":
			p.insecureAddrs[netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)] = true
			p.insecureAddrs[netip.AddrPortFrom(netip.IPv6Loopback(), port)] = true
		}
	}
	for _, pat := range c.hosts {
		pl := strings.ToLower(strings.TrimSuffix(pat, "."))
		rest, wild := strings.CutPrefix(pl, "*.")
		if !validDNSName(rest) || strings.Contains(rest, "*") {
			return nil, fmt.Errorf("allow-hosts pattern %q: want a host name or *.suffix", pat)
		}
		if wild {
			p.suffixes = append(p.suffixes, "."+rest)
		} else {
			p.exact[rest] = true
		}
		p.strict = true
	}
	ports := c.ports
	if len(ports) == 0 {
		ports = []int{443}
	}
	for _, port := range ports {
		if port < 1 || port > 65535 {
			return nil, fmt.Errorf("allow-ports: port %d out of range 1-65535", port)
		}
		p.ports[uint16(port)] = true
	}
	return p, nil
}

// splitHostPort splits an AllowInsecure entry; the port is required.
func splitHostPort(hp string) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, errors.New("want host:port")
	}
	port, ok := parsePort(ps)
	if !ok {
		return "", 0, errors.New("invalid port")
	}
	if host == "" {
		return "", 0, errors.New("empty host")
	}
	return host, port, nil
}

// parsePort parses a canonical decimal port 1-65535 (no sign, no leading zero).
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	if n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

// canonicalHost lower-cases a host and strips one trailing dot. For an IP
// literal it returns the canonical text and the unmapped address. ok is false
// for hosts that are neither an IP literal nor a syntactically valid name.
func canonicalHost(host string) (key string, addr netip.Addr, ok bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, false
		}
		a = a.Unmap()
		return a.String(), a, true
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if !validDNSName(h) {
		return "", netip.Addr{}, false
	}
	return h, netip.Addr{}, true
}

func joinKey(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// validDNSName reports whether h (lower case, no trailing dot) is a sequence
// of non-empty labels of letters, digits, '-' and '_', at most 253 bytes.
// Internationalised names must be in punycode (xn--).
func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// localSuffixes are name suffixes that only resolve inside a host, site or
// cloud network, or are reserved as never resolvable (RFC 6761, RFC 8375).
var localSuffixes = []string{
	".localhost", ".local", ".internal", ".localdomain", ".home.arpa",
	".lan", ".intranet", ".corp", ".home", ".private", ".test", ".invalid",
}

// CheckEndpoint parses a push endpoint and checks it against the policy. It
// returns the parsed URL, or a *BlockedError.
func (p *Policy) CheckEndpoint(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, blocked("empty endpoint")
	}
	if len(raw) > MaxEndpointLen {
		return nil, blocked("endpoint is %d bytes, limit %d", len(raw), MaxEndpointLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// The *url.Error holds the whole URL: never pass it on.
		return nil, blocked("malformed URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		if u.Scheme == "" {
			return nil, blocked("not an absolute URL")
		}
		return nil, blocked("scheme %q not allowed", truncate(u.Scheme))
	}
	if u.Opaque != "" {
		return nil, blocked("not a hierarchical URL")
	}
	if u.User != nil {
		return nil, blocked("userinfo not allowed")
	}
	host := u.Hostname()
	if host == "" {
		return nil, blocked("empty host")
	}
	var port uint16 = 443
	if u.Scheme == "http" {
		port = 80
	}
	if ps := u.Port(); ps != "" {
		var ok bool
		if port, ok = parsePort(ps); !ok {
			return nil, blocked("invalid port")
		}
	}
	key, addr, ok := canonicalHost(host)
	if !ok {
		if strings.Contains(host, "%") {
			return nil, blocked("IPv6 zone not allowed")
		}
		return nil, blocked("invalid host %q", truncate(host))
	}
	if p.insecure[joinKey(key, port)] {
		return u, nil
	}
	if u.Scheme != "https" {
		return nil, blocked("scheme %q not allowed for %s", u.Scheme, key)
	}
	if !p.ports[port] {
		return nil, blocked("port %d not allowed for %s", port, key)
	}
	if addr.IsValid() {
		if !IsPublic(addr) {
			return nil, blocked("address %s is not public", key)
		}
		if p.strict {
			return nil, blocked("IP address %s not in the allowed push hosts", key)
		}
		return u, nil
	}
	if reason := localName(key); reason != "" {
		return nil, blocked("%s", reason)
	}
	if p.strict && !p.hostAllowed(key) {
		return nil, blocked("host %s not in the allowed push hosts", key)
	}
	return u, nil
}

// localName returns why name (canonical, not an IP literal) can never be a
// public push service, or "".
func localName(name string) string {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if numericLabel(last) {
		// WHATWG URL parsers and inet_aton read such hosts as IPv4:
		// 2130706433, 0177.0.0.1, 0x7f.1, 127.1.
		return fmt.Sprintf("numeric host %s is not a canonical IPv4 address", name)
	}
	if !strings.Contains(name, ".") {
		return fmt.Sprintf("host %s is not a fully qualified name", name)
	}
	for _, s := range localSuffixes {
		if strings.HasSuffix(name, s) {
			return fmt.Sprintf("host %s is a local name", name)
		}
	}
	return ""
}

// numericLabel reports whether a label is all decimal digits or a 0x hex
// number, which makes the whole host an IPv4 address to URL parsers.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (p *Policy) hostAllowed(name string) bool {
	if p.exact[name] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// truncate bounds attacker-chosen text quoted in a reason.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// checkAddr is the dial-time rule: a public address, or an IP:port allowed
// insecure, or anything when the dialed host:port was allowed insecure.
func (p *Policy) checkAddr(ap netip.AddrPort, insecureHost bool) error {
	a := ap.Addr().Unmap()
	if insecureHost || p.insecureAddrs[netip.AddrPortFrom(a, ap.Port())] {
		return nil
	}
	if !IsPublic(a) {
		return blocked("dial to non-public address %s", netip.AddrPortFrom(a, ap.Port()))
	}
	return nil
}

// Control checks the address a socket is about to connect to; use it as
// net.Dialer.Control. It refuses non-public addresses unless that exact
// IP:port was allowed insecure (an IP literal or localhost entry).
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return blocked("dial to unparsable address")
	}
	return p.checkAddr(ap, false)
}

// DialContext returns a dial function for http.Transport.DialContext that
// resolves the host itself (WithLookup, else d.Resolver), refuses non-public
// addresses before connecting, and checks again in the socket's control hook
// (after any ControlContext or Control of d). An addr whose host:port was
// allowed insecure may reach any address. d is copied, not modified.
func (p *Policy) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, ps, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		port, ok := parsePort(ps)
		if !ok {
			return nil, blocked("dial to invalid port")
		}
		key, lit, ok := canonicalHost(host)
		if !ok {
			return nil, blocked("dial to invalid host %q", truncate(host))
		}
		insecureHost := p.insecure[joinKey(key, port)]

		var addrs []netip.Addr
		if lit.IsValid() {
			addrs = []netip.Addr{lit}
		} else {
			addrs, err = p.resolve(ctx, d, network, key)
			if err != nil {
				return nil, fmt.Errorf("resolve %s: %w", key, err)
			}
		}

		dd := *d
		dd.Control = nil
		dd.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
			switch {
			case d.ControlContext != nil:
				if err := d.ControlContext(ctx, network, address, c); err != nil {
					return err
				}
			case d.Control != nil:
				if err := d.Control(network, address, c); err != nil {
					return err
				}
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return blocked("dial to unparsable address")
			}
			return p.checkAddr(ap, insecureHost)
		}

		var errs []error
		for _, a := range addrs {
			if !wantFamily(network, a) {
				continue
			}
			ap := netip.AddrPortFrom(a.Unmap(), port)
			if err := p.checkAddr(ap, insecureHost); err != nil {
				errs = append(errs, err)
				continue
			}
			conn, err := dd.DialContext(ctx, network, ap.String())
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("dial %s: no %s address", key, network)
		}
		return nil, errors.Join(errs...)
	}
}

func (p *Policy) resolve(ctx context.Context, d *net.Dialer, network, host string) ([]netip.Addr, error) {
	if p.lookup != nil {
		return p.lookup(ctx, host)
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ipnet := "ip"
	switch network {
	case "tcp4", "udp4":
		ipnet = "ip4"
	case "tcp6", "udp6":
		ipnet = "ip6"
	}
	return r.LookupNetIP(ctx, ipnet, host)
}

func wantFamily(network string, a netip.Addr) bool {
	switch network {
	case "tcp4", "udp4":
		return a.Unmap().Is4()
	case "tcp6", "udp6":
		return a.Is6() && !a.Is4In6()
	}
	return true
}
