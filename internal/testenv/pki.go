package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority with one server certificate
// (127.0.0.1, ::1, localhost) and one client certificate, for Kafka over
// TLS in tests. Nothing of it is ever used outside a test.
type PKI struct {
	CAPEM         []byte
	ServerCertPEM []byte
	ServerKeyPEM  []byte
	ClientCertPEM []byte
	ClientKeyPEM  []byte

	pool *x509.CertPool
}

// NewPKI generates a PKI: an ECDSA P-256 CA valid for a day, and leaf
// certificates it signed.
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tierpush test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.ServerCertPEM, p.ServerKeyPEM = leaf(2, "localhost", x509.ExtKeyUsageServerAuth)
	p.ClientCertPEM, p.ClientKeyPEM = leaf(3, "tierpush-processor", x509.ExtKeyUsageClientAuth)
	return p
}

// ServerConfig is the broker's TLS config. With clientAuth it requires a
// client certificate signed by the CA (mutual TLS).
func (p *PKI) ServerConfig(tb testing.TB, clientAuth bool) *tls.Config {
	tb.Helper()
	cert, err := tls.X509KeyPair(p.ServerCertPEM, p.ServerKeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.pool
	}
	return c
}

// ClientConfig is a client TLS config trusting the CA and presenting the
// client certificate.
func (p *PKI) ClientConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	cert, err := tls.X509KeyPair(p.ClientCertPEM, p.ClientKeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	return &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// PKIFiles are the PEM files of a PKI as a Kubernetes secret mount would
// hold them.
type PKIFiles struct {
	CA, Cert, Key string
}

// WriteFiles writes the CA and the client certificate and key into dir.
func (p *PKI) WriteFiles(tb testing.TB, dir string) PKIFiles {
	tb.Helper()
	f := PKIFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for path, b := range map[string][]byte{f.CA: p.CAPEM, f.Cert: p.ClientCertPEM, f.Key: p.ClientKeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}
