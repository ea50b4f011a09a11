package tlsconfig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

func (o *InitOptions) setDefaults() {
	if len(o.Hosts) == 0 {
		o.Hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// ErrExists is returned by Init when a file it would write exists.
var ErrExists = errors.New("tlsconfig: file exists")

// Init creates a CA (ca.pem, ca-key.pem) in dir and issues the certificates
// of specs with it, ECDSA P-256 keys, private keys readable by the owner
// only. It returns the paths it wrote. It is meant for development and
// trials: production deployments use their own PKI.
func Init(dir string, specs []CertSpec, o InitOptions) ([]string, error) {
	o.setDefaults()
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
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return written, err
	}
	written = append(written, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	for _, s := range specs {
		if err := issue(dir, s, caCert, caKey, o); err != nil {
			return written, err
		}
		written = append(written, filepath.Join(dir, s.Name+".pem"), filepath.Join(dir, s.Name+"-key.pem"))
	}
	return written, nil
}

// Issue issues one more certificate with the CA that Init wrote in dir
// (ca.pem, ca-key.pem), with a new key and serial number, and replaces
// <Name>.pem and <Name>-key.pem: a renewal. Each file is replaced
// atomically (written beside it, then renamed over it), the key first; a
// reader that catches the new key with the old certificate sees a pair that
// does not match (Client keeps its previous pair then). o.Force is ignored.
// It returns the new certificate.
func Issue(dir string, spec CertSpec, o InitOptions) (*x509.Certificate, error) {
	o.setDefaults()
	caCert, caKey, err := loadCA(Files{Cert: filepath.Join(dir, "ca.pem"), Key: filepath.Join(dir, "ca-key.pem")})
	if err != nil {
		return nil, err
	}
	if err := issue(dir, spec, caCert, caKey, o); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, spec.Name+".pem"), filepath.Join(dir, spec.Name+"-key.pem"))
	if err != nil {
		return nil, err
	}
	return pair.Leaf, nil
}

// loadCA reads a CA's certificate and private key.
func loadCA(f Files) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconfig: CA: %w", err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !pair.Leaf.IsCA {
		return nil, nil, fmt.Errorf("tlsconfig: CA %s: not a CA certificate with a signing key", f.Cert)
	}
	return pair.Leaf, key, nil
}

// issue writes the certificate of s, signed by ca, and its new key.
func issue(dir string, s CertSpec, ca *x509.Certificate, caKey crypto.Signer, o InitOptions) error {
	now := o.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("tlsconfig: issue %s: %w", s.Name, err)
	}
	return writePair(dir, s.Name, der, key)
}

// writePair writes <name>-key.pem (owner only) and then <name>.pem.
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", kb, 0o600); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// writePEM replaces path atomically: it writes a temporary file beside it
// with mode, then renames it over path, so a reader sees the old or the new
// content, never a part.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a failure; a no-op after the rename
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Renew issues <name>.pem again with the CA of dir (see Issue): the same
// common name (name), grants (URI SANs) and, for a server certificate,
// hosts as the certificate it replaces, with a new key, serial number and
// validity (o.Validity from now; o.Hosts is ignored). It is meant for the
// certificates Init wrote.
func Renew(dir, name string, o InitOptions) (*x509.Certificate, error) {
	old, err := loadCerts(filepath.Join(dir, name+".pem"))
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: renew %s: %w", name, err)
	}
	spec := CertSpec{Name: name, URIs: old[0].URIs}
	o.Hosts = nil
	for _, u := range old[0].ExtKeyUsage {
		spec.Server = spec.Server || u == x509.ExtKeyUsageServerAuth
	}
	if spec.Server {
		o.Hosts = append(o.Hosts, old[0].DNSNames...)
		for _, ip := range old[0].IPAddresses {
			o.Hosts = append(o.Hosts, ip.String())
		}
	}
	return Issue(dir, spec, o)
}
