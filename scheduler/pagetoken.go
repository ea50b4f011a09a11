package scheduler

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"

	"github.com/reeve-org/reeve/internal/workflow"
)

// Page tokens are opaque to clients (docs/api.md says so): base64url of a
// binary record
//
//	version (1 byte) | list kind (1 byte) | fields, each a uvarint length
//	and its bytes, the first the fingerprint of the filters | checksum (8 bytes)
//
// with every byte after the version masked by a stream derived from the
// checksum, so that the key a page ended at does not show through and a
// token of another list, of other filters, truncated or edited is refused
// (INVALID_ARGUMENT, field page_token). A new version of the format may
// refuse the tokens of an older one: a client then lists from the start.
const pageTokenVersion = 2

// pageKind is the list a page token belongs to.
type pageKind byte

const (
	pageTasks pageKind = iota + 1
	pageWorkflows
	pageAlerts
	pageAgents
)

// encodePageToken returns the token of a page of kind, for the filters'
// fingerprint, ending at fields.
func encodePageToken(kind pageKind, filters string, fields ...string) string {
	body := []byte{byte(kind)}
	for _, f := range append([]string{filters}, fields...) {
		body = binary.AppendUvarint(body, uint64(len(f)))
		body = append(body, f...)
	}
	sum := checksum(body)
	mask(body, sum)
	out := append([]byte{pageTokenVersion}, body...)
	out = binary.BigEndian.AppendUint64(out, sum)
	return base64.RawURLEncoding.EncodeToString(out)
}

// decodePageToken returns the n fields of a token that encodePageToken made
// for kind and the same filters.
func decodePageToken(tok string, kind pageKind, filters string, n int) ([]string, error) {
	bad := func(why string) error {
		return &workflow.FieldError{Field: "page_token", Reason: why + "; pass the next_page_token of a previous response with the same filters, unchanged"}
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(raw) < 1+1+8 || raw[0] != pageTokenVersion {
		return nil, bad("not a page token")
	}
	body := raw[1 : len(raw)-8]
	sum := binary.BigEndian.Uint64(raw[len(raw)-8:])
	mask(body, sum)
	if checksum(body) != sum {
		return nil, bad("not a page token")
	}
	if pageKind(body[0]) != kind {
		return nil, bad("a page token of another list")
	}
	rest := body[1:]
	var fields []string
	for len(rest) > 0 {
		l, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < l {
			return nil, bad("not a page token")
		}
		fields = append(fields, string(rest[k:k+int(l)]))
		rest = rest[k+int(l):]
	}
	if len(fields) != n+1 {
		return nil, bad("not a page token")
	}
	if fields[0] != filters {
		return nil, bad("issued for other filters")
	}
	return fields[1:], nil
}

func checksum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// mask XORs b with a stream seeded by seed (xorshift64); applied twice it
// restores b.
func mask(b []byte, seed uint64) {
	x := seed | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] ^= byte(x)
	}
}

// A list's page size when page_size is 0, and the most a page holds.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// pageSize validates a page size: 0 means the default, more than the
// maximum is lowered to it (AIP-158).
func pageSize(size int32) (int, error) {
	switch {
	case size < 0:
		return 0, &workflow.FieldError{Field: "page_size", Reason: "must not be negative"}
	case size > maxPageSize:
		return maxPageSize, nil
	case size == 0:
		return defaultPageSize, nil
	}
	return int(size), nil
}

// page validates the paging arguments of a list of kind whose filters'
// fingerprint is filters, and returns the page size and the key the page
// starts after ("" for the first page).
func page(kind pageKind, filters string, size int32, token string) (int, string, error) {
	n, err := pageSize(size)
	if err != nil || token == "" {
		return n, "", err
	}
	f, err := decodePageToken(token, kind, filters, 1)
	if err != nil {
		return 0, "", err
	}
	return n, f[0], nil
}
