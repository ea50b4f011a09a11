package pgtest

import (
	"path/filepath"
	"testing"

	"github.com/reeve-org/reeve/internal/pgserver"
	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// TLS configures a server that accepts TLS connections only (see
// pgserver.TLS).
type TLS = pgserver.TLS

// Certs are the files IssueCerts writes.
type Certs struct {
	Dir                   string // the directory of all of them
	CA                    string // ca.pem (its key ca-key.pem beside it)
	ServerCert, ServerKey string // server.pem, server-key.pem: 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // reeve.pem, reeve-key.pem: a client certificate whose CN is User
}

// IssueCerts creates, in a temporary directory of t, a CA and a server and
// a client certificate issued by it, with internal/tlsconfig (as `reeve
// certs init` does). Each call makes a new CA.
func IssueCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	specs := []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: User}}
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	return Certs{
		Dir: dir, CA: p("ca.pem"),
		ServerCert: p("server.pem"), ServerKey: p("server-key.pem"),
		ClientCert: p(User + ".pem"), ClientKey: p(User + "-key.pem"),
	}
}

// TLS returns the server side of c: trust authentication over TLS, or
// with clientCertAuth the client certificate (c.ClientCert) as the
// authentication.
func (c Certs) TLS(clientCertAuth bool) TLS {
	t := TLS{CA: c.CA, Cert: c.ServerCert, Key: c.ServerKey}
	if clientCertAuth {
		t.ClientCA, t.ClientCertAuth = c.CA, true
	}
	return t
}

// StartServerTLS starts a server of the test's own that accepts TLS
// connections only (see TLS), stopped and removed by t.Cleanup. Its DSN
// verifies the server (sslmode=verify-full&sslrootcert=<tls.CA>); with
// tls.ClientCertAuth, add sslcert and sslkey to it.
func StartServerTLS(t testing.TB, tls TLS) *Server {
	t.Helper()
	s := newServer(t)
	if err := s.ConfigureTLS(tls); err != nil {
		t.Fatal(err)
	}
	if err := s.Server.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}
