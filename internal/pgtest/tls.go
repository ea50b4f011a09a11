package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/reeve-org/reeve/internal/tlsconfig"
)

// TLS configures a server that accepts TLS connections only: its pg_hba.conf
// has hostssl lines for 127.0.0.1 and no host line, so a plaintext
// connection (sslmode=disable) is refused.
type TLS struct {
	// CA is the CA that issued Cert: the sslrootcert of the server's DSN.
	CA string
	// Cert and Key are the server's certificate (valid for 127.0.0.1) and
	// its private key. They are copied into the server's directory (the key
	// 0600, owned by the server's user), so the originals may be anywhere.
	Cert, Key string
	// ClientCA is the CA a client certificate must chain to (ssl_ca_file);
	// "" asks no client certificate.
	ClientCA string
	// ClientCertAuth authenticates with the client certificate (pg_hba
	// "cert": a certificate of ClientCA whose common name is the user,
	// here User) instead of trust. It needs ClientCA.
	ClientCertAuth bool
}

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
	if tls.ClientCertAuth && tls.ClientCA == "" {
		t.Fatal("pgtest.StartServerTLS: ClientCertAuth needs a ClientCA")
	}
	s, err := newServer()
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(s.destroy)
	if err := s.configureTLS(tls); err != nil {
		t.Fatal(err)
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// configureTLS copies the certificates into the server's directory and
// writes the ssl settings and a pg_hba.conf without plaintext TCP.
func (s *Server) configureTLS(t TLS) error {
	dir := filepath.Join(s.dir, "tls")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{"server.pem": t.Cert, "server-key.pem": t.Key}
	if t.ClientCA != "" {
		files["client-ca.pem"] = t.ClientCA
	}
	for name, src := range files {
		if err := s.copyOwned(src, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pgtest: TLS files: %w", err)
		}
	}
	conf := fmt.Sprintf("\nssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n",
		filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if t.ClientCA != "" {
		conf += fmt.Sprintf("ssl_ca_file = '%s'\n", filepath.Join(dir, "client-ca.pem"))
	}
	if err := appendFile(filepath.Join(s.dataDir(), "postgresql.conf"), conf); err != nil {
		return err
	}
	method := "trust"
	if t.ClientCertAuth {
		method = "cert"
	}
	// The local (Unix socket) line is pgtest's own way in (adminDSN).
	hba := "local all all trust\n" +
		"hostssl all all 127.0.0.1/32 " + method + "\n" +
		"hostssl all all ::1/128 " + method + "\n"
	if err := os.WriteFile(filepath.Join(s.dataDir(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	s.tlsCA = t.CA
	return nil
}

// copyOwned copies src to dst with mode 0600, owned by the server's user:
// PostgreSQL refuses a key file others can read.
func (s *Server) copyOwned(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		return err
	}
	if s.runAs == "" {
		return nil
	}
	u, err := user.Lookup(s.runAs)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dst, uid, gid)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
