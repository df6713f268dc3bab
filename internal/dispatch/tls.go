package dispatch

import (
	"crypto/tls"
	"crypto/x509"
)

// TLSConfig holds the trust roots of the push client.
type TLSConfig struct {
	RootCAs *x509.CertPool
}

func (c *TLSConfig) clientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}
}
