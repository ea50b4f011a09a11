// Package tlsconfig builds the TLS configurations of Reeve's gRPC servers and
// clients and of its etcd clients from PEM files, and creates a local
// certificate authority for trying the secure mode (see Init).
//
//	srv, err := tlsconfig.Server(tlsconfig.Files{Cert: "server.pem", Key: "server-key.pem", CA: "ca.pem"}, true)
//	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(srv)))
//
// Server configurations can be reloaded from their files (see Reloadable).
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// Files names PEM files. Which are required depends on the use.
type Files struct {
	// CA is the bundle of CA certificates the peer's certificate must chain to.
	CA string
	// Cert and Key are this side's certificate chain and private key.
	Cert string
	Key  string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.CA == "" && f.Cert == "" && f.Key == "" }

// Server returns the TLS configuration of a server: Cert and Key are
// required. With CA set, client certificates are verified against it; with
// requireClientCert they are also required (mutual TLS), else they are
// optional (clients may authenticate with a bearer token instead). TLS 1.2 is
// the minimum version.
func Server(f Files, requireClientCert bool) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tlsconfig: a server needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: server certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if requireClientCert {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	} else if requireClientCert {
		return nil, errors.New("tlsconfig: requiring client certificates needs a client CA")
	}
	return c, nil
}

// Client returns the TLS configuration of a client. The server's
// certificate is verified against CA (the system roots when empty) and
// serverName (the dialed host when empty). Cert and Key, when set, are
// presented as the client certificate.
func Client(f Files, serverName string) (*tls.Config, error) {
	c := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case f.Cert != "" || f.Key != "":
		return nil, errors.New("tlsconfig: a client certificate needs both the certificate and the key")
	}
	return c, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tlsconfig: CA %s: no PEM certificate found", path)
	}
	return pool, nil
}

// Reloadable is a server TLS configuration whose certificate, key and client
// CA can be re-read from their files while the server runs (certificate
// rotation): new handshakes use the new files, established connections keep
// theirs.
type Reloadable struct {
	f       Files
	require bool
	cur     atomic.Pointer[tls.Config]
}

// NewReloadable loads a server configuration as Server does.
func NewReloadable(f Files, requireClientCert bool) (*Reloadable, error) {
	r := &Reloadable{f: f, require: requireClientCert}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the files; on error the previous configuration stays.
func (r *Reloadable) Reload() error {
	c, err := Server(r.f, r.require)
	if err != nil {
		return err
	}
	r.cur.Store(c)
	return nil
}

// Config returns the configuration to serve with: each handshake uses the
// files as last (re)loaded.
func (r *Reloadable) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load(), nil },
	}
}
