package tlsconfig

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// clientCert is a client certificate that follows its files: before each
// handshake it looks at them (os.Stat, no read) and re-reads the pair when
// either changed (another file renamed over it, or a new size or
// modification time). A pair that cannot be read or whose key does not
// match the certificate is not used: the previous one stays, with one
// warning per change of the files. It is safe for concurrent use.
type clientCert struct {
	certPath, keyPath string
	log               *slog.Logger

	mu       sync.Mutex
	cur      *tls.Certificate
	certSeen os.FileInfo // the files as they were when cur was read or last tried
	keySeen  os.FileInfo
}

// newClientCert reads the pair once; an error here is the caller's error.
func newClientCert(certPath, keyPath string, log *slog.Logger) (*clientCert, error) {
	c := &clientCert{certPath: certPath, keyPath: keyPath, log: log}
	// Stat before reading: a change that lands in between is seen next time.
	c.certSeen, _ = os.Stat(certPath)
	c.keySeen, _ = os.Stat(keyPath)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: client certificate: %w", err)
	}
	c.cur = &pair
	return c, nil
}

// get is a tls.Config.GetClientCertificate: it presents the pair as the
// files hold it now, or the previous pair when they hold no valid pair.
func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	certInfo, certErr := os.Stat(c.certPath)
	keyInfo, keyErr := os.Stat(c.keyPath)
	if certErr != nil || keyErr != nil {
		// Missing for a moment while a tool replaces them without rename;
		// not recorded, so they are looked at again next handshake.
		return c.cur, nil
	}
	if sameFile(certInfo, c.certSeen) && sameFile(keyInfo, c.keySeen) {
		return c.cur, nil
	}
	c.certSeen, c.keySeen = certInfo, keyInfo
	pair, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		c.log.Warn("client certificate files changed but hold no valid pair: presenting the previous certificate",
			"cert", c.certPath, "key", c.keyPath, "serial", serialOf(c.cur), "err", err)
		return c.cur, nil
	}
	c.cur = &pair
	c.log.Info("client certificate reloaded", "cert", c.certPath, "serial", serialOf(c.cur), "not_after", pair.Leaf.NotAfter)
	return c.cur, nil
}

// sameFile reports whether b still describes the file a describes: the same
// file (not one renamed over it), size and modification time.
func sameFile(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// serialOf is the serial number of a pair's leaf in hexadecimal, as openssl
// prints it.
func serialOf(c *tls.Certificate) string {
	if c == nil || c.Leaf == nil {
		return ""
	}
	return fmt.Sprintf("%X", c.Leaf.SerialNumber)
}
