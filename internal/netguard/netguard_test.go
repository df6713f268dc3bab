package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func mustNew(t testing.TB, opts ...Option) *Policy {
	t.Helper()
	p, err := New(opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// hostileEndpoints must all be refused by a default policy.
var hostileEndpoints = []string{
	// empty and malformed
	"",
	"   ",
	"fcm.googleapis.com/fcm/send/abc",
	"//fcm.googleapis.com/fcm/send/abc",
	"https://",
	"https:///fcm/send/abc",
	"https:fcm.googleapis.com/fcm/send/abc",
	"https://fcm.googleapis.com:abc/x",
	"https://fcm.googleapis.com:0443/x",
	"https://[::1/x",
	"https://exa mple.com/x",
	"https://%31%32%37.0.0.1/x",
	"https://ex\x00ample.com/x",
	"https://" + strings.Repeat("a", MaxEndpointLen) + ".com/",
	// schemes
	"http://fcm.googleapis.com/fcm/send/abc",
	"HTTP://fcm.googleapis.com/fcm/send/abc",
	"file:///etc/passwd",
	"ftp://fcm.googleapis.com/x",
	"javascript:alert(1)",
	"gopher://127.0.0.1:6379/_FLUSHALL",
	"ws://fcm.googleapis.com/x",
	"data:text/plain,hi",
	// userinfo
	"https://fcm.googleapis.com@127.0.0.1/",
	"https://user:pass@fcm.googleapis.com/fcm/send/abc",
	"https://user@fcm.googleapis.com/fcm/send/abc",
	"https://:@fcm.googleapis.com/",
	// ports
	"https://fcm.googleapis.com:8443/fcm/send/abc",
	"https://fcm.googleapis.com:80/fcm/send/abc",
	"https://fcm.googleapis.com:22/",
	"https://fcm.googleapis.com:65536/",
	// loopback, all spellings
	"https://127.0.0.1/",
	"https://127.0.0.1:443/",
	"https://127.0.0.1./",
	"https://127.1.2.3/",
	"https://[::1]/",
	"https://[0:0:0:0:0:0:0:1]/",
	"https://[::ffff:127.0.0.1]/",
	"https://[::ffff:7f00:1]/",
	"https://[::127.0.0.1]/",
	"https://2130706433/",
	"https://0177.0.0.1/",
	"https://0x7f.1/",
	"https://0x7f000001/",
	"https://0x7F.0.0.1/",
	"https://127.1/",
	"https://127.0.1/",
	"https://017700000001/",
	"https://1.2.3.4.5/",
	"https://[127.0.0.1]/",
	// names
	"https://localhost/",
	"https://localhost./",
	"https://LOCALHOST/",
	"https://foo.localhost/",
	"https://printer.local/",
	"https://metadata.google.internal/computeMetadata/v1/",
	"https://metadata.google.internal./",
	"https://db.internal/",
	"https://pushsim/",
	"https://router.home.arpa/",
	"https://box.lan/",
	"https://svc.test/",
	"https://a..com/",
	"https://xn--bcher-kva.ch\u00e9/",
	"https://bücher.example.com/",
	// RFC 1918, CGNAT, link-local, metadata
	"https://10.0.0.1/",
	"https://10.255.255.255/",
	"https://172.16.0.1/",
	"https://172.31.255.254/",
	"https://192.168.1.1/",
	"https://100.64.0.1/",
	"https://100.127.255.255/",
	"https://100.100.100.200/",
	"https://169.254.169.254/latest/meta-data/",
	"https://169.254.170.2/v2/credentials",
	"https://[fd00:ec2::254]/",
	"https://[::ffff:169.254.169.254]/",
	"https://[::ffff:a9fe:a9fe]/",
	"https://[::ffff:10.0.0.1]/",
	"https://168.63.129.16/",
	"https://192.0.0.192/",
	// IPv6 special
	"https://[fc00::1]/",
	"https://[fd12:3456::1]/",
	"https://[fe80::1]/",
	"https://[fe80::1%25eth0]/",
	"https://[2001:4860:4860::8888%25eth0]/",
	"https://[fec0::1]/",
	"https://[ff02::1]/",
	"https://[ff05::fb]/",
	"https://[::]/",
	"https://[2001:db8::1]/",
	"https://[2002:7f00:1::]/",
	"https://[2002:a00:1::]/",
	"https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
	"https://[64:ff9b::7f00:1]/",
	"https://[64:ff9b::a9fe:a9fe]/",
	"https://[64:ff9b:1::808:808]/",
	"https://[100::1]/",
	// other IPv4 special
	"https://0.0.0.0/",
	"https://0/",
	"https://0.1.2.3/",
	"https://224.0.0.1/",
	"https://239.255.255.250/",
	"https://255.255.255.255/",
	"https://240.0.0.1/",
	"https://198.18.0.1/",
	"https://198.19.255.255/",
	"https://192.0.2.1/",
	"https://198.51.100.7/",
	"https://203.0.113.9/",
	"https://192.88.99.1/",
}

var goodEndpoints = []string{
	"https://fcm.googleapis.com/fcm/send/dXNlcjEyMzQ:APA91bH",
	"https://fcm.googleapis.com:443/fcm/send/abc",
	"https://FCM.googleapis.com/fcm/send/abc",
	"https://fcm.googleapis.com./fcm/send/abc",
	"https://android.googleapis.com/gcm/send/abc",
	"https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk",
	"https://web.push.apple.com/QGuQyavXutnMH1bTx3Q6",
	"https://wns2-par02p.notify.windows.com/w/?token=BQYAAAB",
	"https://fcm.googleapis.com/fcm/send/abc#fragment",
}

func TestCheckEndpointHostile(t *testing.T) {
	if len(hostileEndpoints) < 40 {
		t.Fatalf("only %d hostile endpoints", len(hostileEndpoints))
	}
	p := mustNew(t)
	for _, raw := range hostileEndpoints {
		t.Run(fmt.Sprintf("%q", raw), func(t *testing.T) {
			u, err := p.CheckEndpoint(raw)
			if err == nil {
				t.Fatalf("CheckEndpoint(%q) = %v, want a *BlockedError", raw, u)
			}
			var be *BlockedError
			if !errors.As(err, &be) {
				t.Fatalf("error %v (%T) is not a *BlockedError", err, err)
			}
			if u != nil {
				t.Errorf("got URL %v with an error", u)
			}
		})
	}
}

func TestCheckEndpointGood(t *testing.T) {
	for _, strict := range []bool{false, true} {
		var opts []Option
		if strict {
			opts = append(opts, AllowHosts(DefaultPushHosts()...))
		}
		p := mustNew(t, opts...)
		for _, raw := range goodEndpoints {
			t.Run(fmt.Sprintf("strict=%v/%s", strict, raw), func(t *testing.T) {
				u, err := p.CheckEndpoint(raw)
				if err != nil {
					t.Fatalf("CheckEndpoint: %v", err)
				}
				if got, want := u.String(), raw; got != want {
					t.Errorf("URL = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestCheckEndpointPolicies(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		raw  string
		ok   bool
	}{
		{"public IP default", nil, "https://8.8.8.8/x", true},
		{"public IPv6 default", nil, "https://[2606:4700::1111]/x", true},
		{"NAT64 of public v4", nil, "https://[64:ff9b::808:808]/x", true},
		{"6to4 of public v4", nil, "https://[2002:808:808::1]/x", true},
		{"any public name default", nil, "https://push.example.com/x", true},
		{"strict refuses other name", []Option{AllowHosts(DefaultPushHosts()...)}, "https://push.example.com/x", false},
		{"strict refuses public IP", []Option{AllowHosts(DefaultPushHosts()...)}, "https://8.8.8.8/x", false},
		{"strict suffix needs a subdomain", []Option{AllowHosts("*.push.apple.com")}, "https://push.apple.com/x", false},
		{"strict suffix not a substring", []Option{AllowHosts("*.push.apple.com")}, "https://evilpush.apple.com/x", false},
		{"strict suffix deep", []Option{AllowHosts("*.push.apple.com")}, "https://a.web.push.apple.com/x", true},
		{"strict exact", []Option{AllowHosts("fcm.googleapis.com")}, "https://fcm.googleapis.com/x", true},
		{"strict exact not suffix", []Option{AllowHosts("googleapis.com")}, "https://fcm.googleapis.com/x", false},
		{"extra port", []Option{AllowPorts(443, 8443)}, "https://push.example.com:8443/x", true},
		{"extra port replaces nothing", []Option{AllowPorts(443, 8443)}, "https://push.example.com/x", true},
		{"ports replace default", []Option{AllowPorts(8443)}, "https://push.example.com/x", false},
		{"insecure http loopback", []Option{AllowInsecure("127.0.0.1:8080")}, "http://127.0.0.1:8080/push/1", true},
		{"insecure https loopback", []Option{AllowInsecure("127.0.0.1:8080")}, "https://127.0.0.1:8080/push/1", true},
		{"insecure other port", []Option{AllowInsecure("127.0.0.1:8080")}, "http://127.0.0.1:8081/push/1", false},
		{"insecure other host", []Option{AllowInsecure("127.0.0.1:8080")}, "http://127.0.0.2:8080/push/1", false},
		{"insecure default port needs entry", []Option{AllowInsecure("127.0.0.1:8080")}, "http://127.0.0.1/push/1", false},
		{"insecure port 80 entry", []Option{AllowInsecure("127.0.0.1:80")}, "http://127.0.0.1/push/1", true},
		{"insecure v6", []Option{AllowInsecure("[::1]:9000")}, "http://[0::1]:9000/p", true},
		{"insecure localhost", []Option{AllowInsecure("localhost:9000")}, "http://LocalHost:9000/p", true},
		{"insecure name", []Option{AllowInsecure("pushsim:8080")}, "http://pushsim:8080/p", true},
		{"insecure name not ip", []Option{AllowInsecure("localhost:9000")}, "http://127.0.0.1:9000/p", false},
		{"insecure still no userinfo", []Option{AllowInsecure("127.0.0.1:8080")}, "http://a:b@127.0.0.1:8080/p", false},
		{"insecure exempt from strict", []Option{AllowInsecure("pushsim:8080"), AllowHosts(DefaultPushHosts()...)}, "http://pushsim:8080/p", true},
		{"insecure public http", []Option{AllowInsecure("push.example.com:80")}, "http://push.example.com/p", true},
		{"insecure does not open others", []Option{AllowInsecure("push.example.com:80")}, "http://fcm.googleapis.com/p", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, tt.opts...)
			_, err := p.CheckEndpoint(tt.raw)
			if got := err == nil; got != tt.ok {
				t.Errorf("CheckEndpoint(%q) err = %v, want ok=%v", tt.raw, err, tt.ok)
			}
		})
	}
}

func TestNewInvalid(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"insecure without port", AllowInsecure("127.0.0.1"), "allow-insecure"},
		{"insecure bad port", AllowInsecure("127.0.0.1:http"), "allow-insecure"},
		{"insecure port zero", AllowInsecure("127.0.0.1:0"), "allow-insecure"},
		{"insecure empty host", AllowInsecure(":8080"), "allow-insecure"},
		{"insecure zone", AllowInsecure("[fe80::1%eth0]:80"), "allow-insecure"},
		{"insecure bad host", AllowInsecure("a b:80"), "allow-insecure"},
		{"hosts bad wildcard", AllowHosts("push.*.com"), "allow-hosts"},
		{"hosts bare star", AllowHosts("*"), "allow-hosts"},
		{"hosts empty", AllowHosts(""), "allow-hosts"},
		{"port range", AllowPorts(70000), "allow-ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestBlockedErrorHidesSecrets checks that reasons never carry the URL path,
// query or userinfo, which are the subscription's capability.
func TestBlockedErrorHidesSecrets(t *testing.T) {
	const secret = "SECRETtoken123"
	p := mustNew(t, AllowHosts(DefaultPushHosts()...))
	for _, raw := range []string{
		"http://fcm.googleapis.com/fcm/send/" + secret,
		"https://fcm.googleapis.com:8443/fcm/send/" + secret,
		"https://127.0.0.1/fcm/send/" + secret,
		"https://" + secret + ":x@fcm.googleapis.com/",
		"https://x:" + secret + "@fcm.googleapis.com/",
		"https://push.example.com/wpush/" + secret,
		"https://fcm.googleapis.com/%zz/" + secret,
		"https://localhost/?t=" + secret,
	} {
		_, err := p.CheckEndpoint(raw)
		if err == nil {
			t.Fatalf("CheckEndpoint(%q) accepted", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q leaks the secret", err)
		}
	}
}

func TestIsPublic(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"142.250.0.1", true},
		{"100.63.255.255", true},
		{"100.128.0.0", true},
		{"172.15.255.255", true},
		{"172.32.0.0", true},
		{"2607:f8b0::1", true},
		{"::ffff:8.8.8.8", true},
		{"64:ff9b::8.8.8.8", true},
		{"127.0.0.1", false},
		{"10.1.2.3", false},
		{"169.254.169.254", false},
		{"fd00:ec2::254", false},
		{"::ffff:127.0.0.1", false},
		{"::", false},
		{"::1", false},
		{"fe80::1%eth0", false},
		{"2001:4860::1%eth0", false},
		{"ff0e::1", false},
		{"3fff::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := IsPublic(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("IsPublic(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
	if IsPublic(netip.Addr{}) {
		t.Error("IsPublic(zero Addr) = true")
	}
}

func TestControl(t *testing.T) {
	p := mustNew(t, AllowInsecure("127.0.0.1:8080", "localhost:9000"))
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:443", false},
		{"10.0.0.1:443", false},
		{"169.254.169.254:80", false},
		{"[::1]:443", false},
		{"[::ffff:127.0.0.1]:443", false},
		{"[fe80::1%eth0]:443", false},
		{"127.0.0.1:8081", false},
		{"not-an-address", false},
		{"8.8.8.8:443", true},
		{"[2606:4700::1111]:443", true},
		{"127.0.0.1:8080", true},
		{"[::ffff:127.0.0.1]:8080", true},
		{"127.0.0.1:9000", true},
		{"[::1]:9000", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := p.Control("tcp", tt.addr, nil)
			if got := err == nil; got != tt.ok {
				t.Errorf("Control(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
			}
			var be *BlockedError
			if err != nil && !errors.As(err, &be) {
				t.Errorf("error %T is not a *BlockedError", err)
			}
		})
	}
}

// TestControlDialer uses Control in a real net.Dialer against a loopback
// listener: refused by default, allowed with the exact AllowInsecure entry.
func TestControlDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()

	deny := mustNew(t)
	d := &net.Dialer{Control: deny.Control}
	if c, err := d.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s allowed by default policy", addr)
	} else if be := (*BlockedError)(nil); !errors.As(err, &be) {
		t.Fatalf("dial error %v is not a *BlockedError", err)
	}

	allow := mustNew(t, AllowInsecure(addr))
	d = &net.Dialer{Control: allow.Control}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s with AllowInsecure: %v", addr, err)
	}
	c.Close()
}

// errNoOutbound stops a test dial to a public address before it connects.
var errNoOutbound = errors.New("test: no outbound connections")

// TestDialContextRebinding resolves the same name to a public address, then
// to loopback: the second dial must be refused before connecting, and the
// loopback server must see nothing.
func TestDialContextRebinding(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	defer srv.Close()
	srvAddr := netip.MustParseAddrPort(srv.Listener.Addr().String())

	var lookups atomic.Int64
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host != "rebind.example.com" {
			return nil, fmt.Errorf("unexpected lookup %q", host)
		}
		if lookups.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return []netip.Addr{srvAddr.Addr()}, nil
	}
	var mu sync.Mutex
	var dialed []string
	d := &net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		mu.Lock()
		dialed = append(dialed, address)
		mu.Unlock()
		return errNoOutbound
	}}
	p := mustNew(t, WithLookup(lookup), AllowPorts(int(srvAddr.Port())))
	client := &http.Client{Transport: &http.Transport{DialContext: p.DialContext(d), DisableKeepAlives: true}}
	endpoint := fmt.Sprintf("http://rebind.example.com:%d/push", srvAddr.Port())

	// First request: the name is public, the dial passes the policy and is
	// stopped by the test's own control hook before connecting.
	_, err := client.Get(endpoint)
	if !errors.Is(err, errNoOutbound) {
		t.Fatalf("first request err = %v, want errNoOutbound", err)
	}
	// Second request: the name now resolves to loopback.
	_, err = client.Get(endpoint)
	var be *BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("second request err = %v, want a *BlockedError", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(dialed, ","), fmt.Sprintf("93.184.216.34:%d", srvAddr.Port()); got != want {
		t.Errorf("dialed %q, want %q", got, want)
	}
	if got := hits.Load(); got != 0 {
		t.Errorf("loopback server hits = %d, want 0", got)
	}
	if got := lookups.Load(); got != 2 {
		t.Errorf("lookups = %d, want 2", got)
	}
}

// TestDialContextInsecure shows the loopback server is reachable through
// DialContext when allowed, so the zero hits above mean something.
func TestDialContextInsecure(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	defer srv.Close()
	srvAddr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return []netip.Addr{srvAddr.Addr()}, nil
	}
	tests := []struct {
		name string
		opts []Option
		url  string
		ok   bool
	}{
		{"ip entry", []Option{AllowInsecure(srvAddr.String())}, srv.URL, true},
		{"ip entry via name", []Option{AllowInsecure(srvAddr.String()), WithLookup(lookup)}, fmt.Sprintf("http://pushsim:%d/", srvAddr.Port()), true},
		{"name entry", []Option{AllowInsecure(fmt.Sprintf("pushsim:%d", srvAddr.Port())), WithLookup(lookup)}, fmt.Sprintf("http://pushsim:%d/", srvAddr.Port()), true},
		{"other name entry", []Option{AllowInsecure(fmt.Sprintf("other:%d", srvAddr.Port())), WithLookup(lookup)}, fmt.Sprintf("http://pushsim:%d/", srvAddr.Port()), false},
		{"no entry", nil, srv.URL, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			p := mustNew(t, tt.opts...)
			client := &http.Client{Transport: &http.Transport{DialContext: p.DialContext(&net.Dialer{}), DisableKeepAlives: true}}
			resp, err := client.Get(tt.url)
			if err == nil {
				resp.Body.Close()
			}
			if got := err == nil; got != tt.ok {
				t.Fatalf("GET err = %v, want ok=%v", err, tt.ok)
			}
			want := before
			if tt.ok {
				want++
			}
			if got := hits.Load(); got != want {
				t.Errorf("hits = %d, want %d", got, want)
			}
		})
	}
}

func FuzzCheckEndpoint(f *testing.F) {
	for _, s := range hostileEndpoints {
		f.Add(s)
	}
	for _, s := range goodEndpoints {
		f.Add(s)
	}
	f.Add("http://127.0.0.1:8080/push")
	f.Add("https://[::ffff:127.0.0.1]:8080/")
	const insecure = "127.0.0.1:8080"
	p := mustNew(f, AllowInsecure(insecure))
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := p.CheckEndpoint(raw)
		if err != nil {
			var be *BlockedError
			if !errors.As(err, &be) {
				t.Fatalf("error %T is not a *BlockedError", err)
			}
			if u != nil {
				t.Fatal("URL returned with an error")
			}
			if len(raw) > 8 && strings.Contains(err.Error(), raw) {
				t.Fatalf("error %q contains the endpoint", err)
			}
			return
		}
		if u.User != nil {
			t.Fatalf("accepted userinfo in %q", raw)
		}
		host := u.Hostname()
		if host == "" {
			t.Fatalf("accepted empty host in %q", raw)
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		a, ipErr := netip.ParseAddr(host)
		isInsecure := ipErr == nil && net.JoinHostPort(a.Unmap().String(), port) == insecure
		switch {
		case isInsecure:
			if u.Scheme != "https" && u.Scheme != "http" {
				t.Fatalf("accepted scheme %q", u.Scheme)
			}
		case u.Scheme != "https":
			t.Fatalf("accepted scheme %q in %q", u.Scheme, raw)
		case port != "443":
			t.Fatalf("accepted port %q in %q", port, raw)
		case ipErr == nil && !IsPublic(a):
			t.Fatalf("accepted non-public IP host in %q", raw)
		}
		// Re-parsing what was accepted must give the same host: no parser
		// differential between validation and the HTTP client.
		u2, err := url.Parse(u.String())
		if err != nil || u2.Host != u.Host {
			t.Fatalf("reparse of %q: host %q, err %v", raw, u2.Host, err)
		}
	})
}

func BenchmarkCheckEndpoint(b *testing.B) {
	p := mustNew(b, AllowHosts(DefaultPushHosts()...))
	raw := "https://fcm.googleapis.com/fcm/send/dXNlcjEyMzQ:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.CheckEndpoint(raw); err != nil {
			b.Fatal(err)
		}
	}
}
