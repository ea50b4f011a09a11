package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
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

// ConfigureTLS makes the server, before its first Start, accept TLS
// connections only (see TLS): it copies the certificates into the server's
// directory and writes the ssl settings and a pg_hba.conf without plaintext
// TCP. The server's DSN then verifies the server
// (sslmode=verify-full&sslrootcert=<t.CA>); with t.ClientCertAuth, add
// sslcert and sslkey to it.
func (s *Server) ConfigureTLS(t TLS) error {
	if t.ClientCertAuth && t.ClientCA == "" {
		return errors.New("pgserver: ClientCertAuth needs a ClientCA")
	}
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
			return fmt.Errorf("pgserver: TLS files: %w", err)
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
	// The local (Unix socket) line is the package's own way in (adminDSN).
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
