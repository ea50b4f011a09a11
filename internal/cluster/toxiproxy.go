package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Toxiproxy talks to a toxiproxy server's HTTP API (v2.12.0): proxies
// between the cluster's components, and toxics on them. The API is small
// and stable; a plain HTTP client avoids pulling toxiproxy's server
// dependencies into go.mod.
type Toxiproxy struct {
	// URL is the API's base URL, e.g. http://127.0.0.1:8474.
	URL  string
	http *http.Client
}

// NewToxiproxy returns a client of the API at url.
func NewToxiproxy(url string) *Toxiproxy {
	return &Toxiproxy{URL: url, http: &http.Client{Timeout: 5 * time.Second}}
}

// Toxic is one network fault on a proxy. Type is latency, reset_peer,
// timeout, bandwidth, slow_close, slicer or limit_data; Stream upstream or
// downstream; Attributes as the toxic type documents (e.g. latency: latency
// and jitter in ms; bandwidth: rate in KB/s; timeout: timeout in ms).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float64        `json:"toxicity"`
	Attributes map[string]int `json:"attributes"`
}

// CreateProxy creates (or replaces) a proxy listening on listen that
// forwards to upstream.
func (t *Toxiproxy) CreateProxy(ctx context.Context, name, listen, upstream string) error {
	_ = t.do(ctx, http.MethodDelete, "/proxies/"+name, nil) // replace
	return t.do(ctx, http.MethodPost, "/proxies", map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true})
}

// AddToxic adds a toxic to a proxy.
func (t *Toxiproxy) AddToxic(ctx context.Context, proxy string, tx Toxic) error {
	return t.do(ctx, http.MethodPost, "/proxies/"+proxy+"/toxics", tx)
}

// RemoveToxic removes a toxic from a proxy.
func (t *Toxiproxy) RemoveToxic(ctx context.Context, proxy, toxic string) error {
	return t.do(ctx, http.MethodDelete, "/proxies/"+proxy+"/toxics/"+toxic, nil)
}

// Reset enables every proxy and removes every toxic.
func (t *Toxiproxy) Reset(ctx context.Context) error {
	return t.do(ctx, http.MethodPost, "/reset", nil)
}

// Ping reports whether the API answers.
func (t *Toxiproxy) Ping(ctx context.Context) error {
	return t.do(ctx, http.MethodGet, "/version", nil)
}

func (t *Toxiproxy) do(ctx context.Context, method, path string, body any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.URL+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.http.Do(req)
	if err != nil {
		return fmt.Errorf("toxiproxy %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("toxiproxy %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
