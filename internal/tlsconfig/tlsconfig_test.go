package tlsconfig_test

import (
	"crypto/tls"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/reeve-org/reeve/internal/tlsconfig"
)

var specs = []tlsconfig.CertSpec{{Name: "server", Server: true}, {Name: "client", URIs: []*url.URL{{Scheme: "reeve", Host: "client", Path: "/a"}}}}

// handshake runs one TLS handshake between srv and a client of ca with the
// client certificate of dir.
func handshake(t *testing.T, srv *tls.Config, dir string) error {
	t.Helper()
	cli, err := tlsconfig.Client(tlsconfig.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")}, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	serverErr := make(chan error, 1)
	go func() {
		s := tls.Server(a, srv)
		serverErr <- s.Handshake()
		_ = s.Close()
	}()
	c := tls.Client(b, cli)
	err = c.Handshake()
	if err == nil {
		// TLS 1.3 clients finish before the server checked their certificate.
		_, err = c.Read(make([]byte, 1))
		if err != nil && err.Error() == "EOF" {
			err = nil
		}
	}
	if serr := <-serverErr; serr != nil {
		return serr
	}
	return err
}

func TestReloadableServesRotatedFiles(t *testing.T) {
	dir, next := t.TempDir(), t.TempDir()
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsconfig.Init(next, specs, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := tlsconfig.NewReloadable(tlsconfig.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, r.Config(), dir); err != nil {
		t.Fatalf("client of the first CA: %v", err)
	}
	if err := handshake(t, r.Config(), next); err == nil {
		t.Fatal("client of another CA accepted")
	}
	// Rotate: the second CA's files replace the first's, then reload.
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, r.Config(), dir); err == nil {
		t.Fatal("rotated client accepted before the reload")
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, r.Config(), dir); err != nil {
		t.Fatalf("rotated client after the reload: %v", err)
	}
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsconfig.Init(dir, specs, tlsconfig.InitOptions{}); err == nil {
		t.Fatal("second Init overwrote the files")
	}
}
