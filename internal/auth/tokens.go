package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// TokenEntry is one bearer token of a tokens file.
type TokenEntry struct {
	// Name identifies the token's holder in logs and rate limits.
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 of the token (preferred: the file then
	// holds no secret).
	SHA256 string `json:"sha256,omitempty"`
	// Token is the token itself, when SHA256 is not given.
	Token string `json:"token,omitempty"`
	// Grants are grant URIs, e.g. "reeve://client/payments".
	Grants []string `json:"grants"`
}

// TokensFile is the YAML or JSON file named by --tokens-file.
type TokensFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// Tokens maps token digests to principals.
type Tokens map[[sha256.Size]byte]*Principal

// LoadTokens reads a tokens file (YAML or JSON; unknown fields are errors).
func LoadTokens(path string) (Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	return ParseTokens(b)
}

// ParseTokens parses the contents of a tokens file.
func ParseTokens(b []byte) (Tokens, error) {
	var f TokensFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	out := Tokens{}
	for i, e := range f.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		if e.Name == "" {
			return nil, fmt.Errorf("auth: tokens file: %s.name: required", field)
		}
		var sum [sha256.Size]byte
		switch {
		case e.SHA256 != "" && e.Token != "":
			return nil, fmt.Errorf("auth: tokens file: %s: set sha256 or token, not both", field)
		case e.SHA256 != "":
			d, err := hex.DecodeString(e.SHA256)
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("auth: tokens file: %s.sha256: want 64 hex digits", field)
			}
			copy(sum[:], d)
		case len(e.Token) >= 16:
			sum = sha256.Sum256([]byte(e.Token))
		default:
			return nil, fmt.Errorf("auth: tokens file: %s: sha256 required (or a token of at least 16 characters)", field)
		}
		if _, dup := out[sum]; dup {
			return nil, fmt.Errorf("auth: tokens file: %s: duplicate token", field)
		}
		p := &Principal{Name: "token:" + e.Name}
		if len(e.Grants) == 0 {
			return nil, fmt.Errorf("auth: tokens file: %s.grants: at least one required", field)
		}
		for j, s := range e.Grants {
			g, err := ParseGrant(s)
			if err != nil {
				return nil, fmt.Errorf("auth: tokens file: %s.grants[%d]: %w", field, j, err)
			}
			p.Grants = append(p.Grants, g)
		}
		out[sum] = p
	}
	return out, nil
}

// NewToken returns a random token (32 bytes, base64url) and the tokens-file
// entry for it, holding only its digest.
func NewToken(name string, grants []Grant) (string, TokenEntry, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", TokenEntry{}, err
	}
	tok := base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(tok))
	e := TokenEntry{Name: name, SHA256: hex.EncodeToString(sum[:])}
	for _, g := range grants {
		e.Grants = append(e.Grants, g.String())
	}
	return tok, e, nil
}

// MarshalTokensFile renders entries as a tokens file (JSON, which is also YAML).
func MarshalTokensFile(entries []TokenEntry) ([]byte, error) {
	return json.MarshalIndent(TokensFile{Tokens: entries}, "", "  ")
}
