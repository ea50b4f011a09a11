package tlsconfig

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// revocations are the serial numbers a CRL file revokes, per issuing CA.
type revocations struct {
	byIssuer map[string]map[string]bool // CA certificate (DER) -> serial (decimal) -> revoked
}

// loadRevocations reads the certificate revocation lists of path (PEM
// "X509 CRL" blocks, or one DER list). Each must be signed by one of cas;
// its next-update time is not enforced (the file is the operator's own,
// re-read on reload, not fetched).
func loadRevocations(path string, cas []*x509.Certificate) (*revocations, error) {
	lists, err := readCRLs(path)
	if err != nil {
		return nil, err
	}
	r := &revocations{byIssuer: map[string]map[string]bool{}}
	for i, l := range lists {
		ca := signerOf(l, cas)
		if ca == nil {
			return nil, fmt.Errorf("tlsconfig: CRL %s (list %d, issuer %q): not signed by a client CA", path, i+1, l.Issuer.String())
		}
		serials := r.byIssuer[string(ca.Raw)]
		if serials == nil {
			serials = map[string]bool{}
			r.byIssuer[string(ca.Raw)] = serials
		}
		for _, e := range l.RevokedCertificateEntries {
			serials[e.SerialNumber.String()] = true
		}
	}
	return r, nil
}

func readCRLs(path string) ([]*x509.RevocationList, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: CRL: %w", err)
	}
	var ders [][]byte
	for rest := b; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "X509 CRL" {
			ders = append(ders, block.Bytes)
		}
	}
	if len(ders) == 0 && !bytes.Contains(b, []byte("-----BEGIN")) {
		ders = [][]byte{b} // DER
	}
	if len(ders) == 0 {
		return nil, fmt.Errorf("tlsconfig: CRL %s: no PEM \"X509 CRL\" block found", path)
	}
	var out []*x509.RevocationList
	for i, der := range ders {
		l, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: CRL %s (list %d): %w", path, i+1, err)
		}
		out = append(out, l)
	}
	return out, nil
}

func signerOf(l *x509.RevocationList, cas []*x509.Certificate) *x509.Certificate {
	for _, ca := range cas {
		if l.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// check refuses verified chains whose leaf its issuer revoked. nil r
// revokes nothing.
func (r *revocations) check(chains [][]*x509.Certificate) error {
	if r == nil {
		return nil
	}
	for _, chain := range chains {
		if len(chain) < 2 {
			continue
		}
		leaf, issuer := chain[0], chain[1]
		if r.byIssuer[string(issuer.Raw)][leaf.SerialNumber.String()] {
			return fmt.Errorf("%w: %q, serial %X", ErrRevoked, leaf.Subject.CommonName, leaf.SerialNumber)
		}
	}
	return nil
}

// ErrRevoked is the error of a client certificate the CRL revokes.
var ErrRevoked = errors.New("tlsconfig: client certificate revoked")

// loadCerts reads the certificates of a PEM bundle.
func loadCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: CA: %w", err)
	}
	var out []*x509.Certificate
	for rest := b; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: CA %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tlsconfig: CA %s: no PEM certificate found", path)
	}
	return out, nil
}

// Revoke adds the certificates of certPaths (each file's first
// certificate) to the certificate revocation list at crlPath, signed by
// the CA of ca.Cert and ca.Key; it creates the list when missing (with no
// certificate: an empty list, to start a server with). The list's number
// grows by one each time, it is valid until the CA expires, and the file
// is replaced atomically. A certificate not issued by the CA is an error,
// and one already revoked is kept once. It returns the serial numbers the
// list holds.
func Revoke(ca Files, crlPath string, certPaths []string, now time.Time) ([]*big.Int, error) {
	caCert, caKey, err := loadCA(ca)
	if err != nil {
		return nil, err
	}
	var entries []x509.RevocationListEntry
	number := big.NewInt(1)
	if lists, err := readCRLs(crlPath); err == nil {
		if len(lists) != 1 || lists[0].CheckSignatureFrom(caCert) != nil {
			return nil, fmt.Errorf("tlsconfig: CRL %s: not one list signed by the CA %s; move it away to start a new one", crlPath, ca.Cert)
		}
		entries = lists[0].RevokedCertificateEntries
		if lists[0].Number != nil {
			number.Add(lists[0].Number, big.NewInt(1))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.SerialNumber.String()] = true
	}
	for _, p := range certPaths {
		cs, err := loadCerts(p)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: certificate to revoke: %w", err)
		}
		if err := cs[0].CheckSignatureFrom(caCert); err != nil {
			return nil, fmt.Errorf("tlsconfig: %s was not issued by the CA %s: %w", p, ca.Cert, err)
		}
		if !have[cs[0].SerialNumber.String()] {
			have[cs[0].SerialNumber.String()] = true
			entries = append(entries, x509.RevocationListEntry{SerialNumber: cs[0].SerialNumber, RevocationTime: now})
		}
	}
	if !now.Before(caCert.NotAfter) {
		return nil, fmt.Errorf("tlsconfig: CA %s expired at %s", ca.Cert, caCert.NotAfter)
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now,
		NextUpdate:                caCert.NotAfter,
		RevokedCertificateEntries: entries,
	}, caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: sign CRL: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(crlPath), 0o700); err != nil {
		return nil, err
	}
	if err := writePEM(crlPath, "X509 CRL", der, 0o644); err != nil {
		return nil, err
	}
	serials := make([]*big.Int, len(entries))
	for i, e := range entries {
		serials[i] = e.SerialNumber
	}
	return serials, nil
}
