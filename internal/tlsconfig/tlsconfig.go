// Package tlsconfig builds the TLS configurations of Reeve's gRPC servers and
// clients and of its etcd clients from PEM files, and creates a local
// certificate authority for trying the secure mode (see Init).
//
//	srv, err := tlsconfig.Server(tlsconfig.Files{Cert: "server.pem", Key: "server-key.pem", CA: "ca.pem"}, true)
//	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(srv)))
//
// Server configurations can be reloaded from their files (see Reloadable),
// with a certificate revocation list (Files.CRL, written by Revoke for a
// local CA). A client configuration follows its certificate files by
// itself: each handshake presents the pair the files hold then (see Client).
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
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
	// CRL, for a server with a client CA only, is a file of certificate
	// revocation lists (PEM or DER), each signed by a certificate of CA:
	// client certificates they revoke are refused in the handshake.
	CRL string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.CA == "" && f.Cert == "" && f.Key == "" && f.CRL == "" }

// Server returns the TLS configuration of a server: Cert and Key are
// required. With CA set, client certificates are verified against it; with
// requireClientCert they are also required (mutual TLS), else they are
// optional (clients may authenticate with a bearer token instead). With CRL
// set too, a client certificate it revokes is refused in the handshake (a
// CRL that cannot be read, or not signed by a certificate of CA, is an
// error). TLS 1.2 is the minimum version.
func Server(f Files, requireClientCert bool) (*tls.Config, error) {
	c, _, err := server(f, requireClientCert)
	return c, err
}

func server(f Files, requireClientCert bool) (*tls.Config, *revocations, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, errors.New("tlsconfig: a server needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: server certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CA == "" {
		if requireClientCert {
			return nil, nil, errors.New("tlsconfig: requiring client certificates needs a client CA")
		}
		if f.CRL != "" {
			return nil, nil, errors.New("tlsconfig: a CRL needs a client CA")
		}
		return c, nil, nil
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, nil, err
	}
	c.ClientCAs = pool
	c.ClientAuth = tls.VerifyClientCertIfGiven
	if requireClientCert {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if f.CRL == "" {
		return c, nil, nil
	}
	cas, err := loadCerts(f.CA)
	if err != nil {
		return nil, nil, err
	}
	rev, err := loadRevocations(f.CRL, cas)
	if err != nil {
		return nil, nil, err
	}
	// VerifyConnection runs on every handshake, resumed ones included.
	c.VerifyConnection = func(cs tls.ConnectionState) error { return rev.check(cs.VerifiedChains) }
	return c, rev, nil
}

// Client returns the TLS configuration of a client. The server's
// certificate is verified against CA (the system roots when empty) and
// serverName (the dialed host when empty). Cert and Key, when set, are
// presented as the client certificate, and followed: each handshake (each
// new connection) presents the pair the files hold then, so a renewed
// certificate is used without a restart while established connections keep
// theirs. Files that hold no valid pair (half replaced, a key that does not
// match) leave the previous pair in use, with a warning on slog.Default().
// The CA bundle is read once: a client trusts a new server CA after a
// restart.
func Client(f Files, serverName string) (*tls.Config, error) {
	return ClientWithLogger(f, serverName, slog.Default())
}

// ClientWithLogger is Client logging the client certificate's reloads (info)
// and unusable files (warn) to log.
func ClientWithLogger(f Files, serverName string, log *slog.Logger) (*tls.Config, error) {
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
		cc, err := newClientCert(f.Cert, f.Key, log.With("component", "tls"))
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = cc.get
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

// Reloadable is a server TLS configuration whose certificate, key, client
// CA and CRL can be re-read from their files while the server runs
// (certificate rotation, revocation): new handshakes use the new files,
// established connections keep theirs (TLS checks a certificate at the
// handshake only; see CheckRevoked for calls on them).
type Reloadable struct {
	f       Files
	require bool
	cur     atomic.Pointer[serverState]
}

type serverState struct {
	cfg *tls.Config
	rev *revocations
}

// NewReloadable loads a server configuration as Server does.
func NewReloadable(f Files, requireClientCert bool) (*Reloadable, error) {
	r := &Reloadable{f: f, require: requireClientCert}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the files; on error the previous configuration stays,
// CRL included.
func (r *Reloadable) Reload() error {
	c, rev, err := server(r.f, r.require)
	if err != nil {
		return err
	}
	r.cur.Store(&serverState{cfg: c, rev: rev})
	return nil
}

// Config returns the configuration to serve with: each handshake uses the
// files as last (re)loaded.
func (r *Reloadable) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().cfg, nil },
	}
}

// CheckRevoked returns an error wrapping ErrRevoked when the CRL as last
// (re)loaded revokes the leaf of one of a connection's verified chains; nil
// without a CRL. The handshake checks this already; an authorizer calls it
// on every call, so that a certificate revoked after its connection was
// established is refused its next calls (see auth.Config.Revoked).
func (r *Reloadable) CheckRevoked(verifiedChains [][]*x509.Certificate) error {
	return r.cur.Load().rev.check(verifiedChains)
}
