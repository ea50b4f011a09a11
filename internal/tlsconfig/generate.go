package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CertSpec describes one certificate Init issues.
type CertSpec struct {
	// Name is the certificate's common name and the base of its files:
	// <Name>.pem and <Name>-key.pem.
	Name string
	// Server makes it a server certificate valid for InitOptions.Hosts;
	// otherwise it is a client certificate.
	Server bool
	// URIs are the certificate's URI subject alternative names (Reeve reads
	// roles and namespaces from them, see internal/auth).
	URIs []*url.URL
}

// InitOptions configures Init.
type InitOptions struct {
	// Hosts are the DNS names and IP addresses server certificates are valid
	// for; default localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Validity of the CA and the certificates; default one year.
	Validity time.Duration
	// Force overwrites existing files; without it Init refuses to.
	Force bool
	// Now is the issue time, for tests; default time.Now.
	Now func() time.Time
}

// ErrExists is returned by Init when a file it would write exists.
var ErrExists = errors.New("tlsconfig: file exists")

// Init creates a CA (ca.pem, ca-key.pem) in dir and issues the certificates
// of specs with it, ECDSA P-256 keys, private keys readable by the owner
// only. It returns the paths it wrote. It is meant for development and
// trials: production deployments use their own PKI.
func Init(dir string, specs []CertSpec, o InitOptions) ([]string, error) {
	if len(o.Hosts) == 0 {
		o.Hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	names := []string{"ca"}
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if !o.Force {
		for _, n := range names {
			for _, p := range []string{filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem")} {
				if _, err := os.Stat(p); err == nil {
					return nil, fmt.Errorf("%w: %s (use --force to overwrite)", ErrExists, p)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return nil, err
				}
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := o.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Reeve local CA", Organization: []string{"reeve"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	var written []string
	write := func(name string, der []byte, key *ecdsa.PrivateKey) error {
		certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(keyPath, "PRIVATE KEY", kb, 0o600); err != nil {
			return err
		}
		written = append(written, certPath, keyPath)
		return nil
	}
	if err := write("ca", caDER, caKey); err != nil {
		return written, err
	}
	for _, s := range specs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return written, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: s.Name, Organization: []string{"reeve"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(o.Validity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			URIs:         s.URIs,
		}
		if s.Server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			for _, h := range o.Hosts {
				if ip := net.ParseIP(h); ip != nil {
					tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
				} else {
					tmpl.DNSNames = append(tmpl.DNSNames, h)
				}
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return written, fmt.Errorf("tlsconfig: issue %s: %w", s.Name, err)
		}
		if err := write(s.Name, der, key); err != nil {
			return written, err
		}
	}
	return written, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, mode) // O_CREATE's mode does not apply to an existing file
}
