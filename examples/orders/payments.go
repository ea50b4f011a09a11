package main

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
)

// paymentService is a stand-in for a remote payment provider: it fails a
// share of requests with 503 and charges each Idempotency-Key only once,
// returning the first charge for repeated keys, as real providers do.
type paymentService struct {
	failRate float64
	rng      *rand.Rand // guarded by mu

	mu      sync.Mutex
	charges map[string]string // idempotency key -> charge id
	calls   int
}

// newPaymentService fails failRate of requests, drawn from seed (0: random).
func newPaymentService(failRate float64, seed uint64) *paymentService {
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &paymentService{failRate: failRate, rng: rand.New(rand.NewPCG(seed, seed)), charges: map[string]string{}}
}

// start serves on a free loopback port and returns its base URL and a stop
// function.
func (p *paymentService) start() (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: p}
	go func() { _ = srv.Serve(lis) }()
	return "http://" + lis.Addr().String(), func() { _ = srv.Close() }, nil
}

func (p *paymentService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		http.Error(w, "POST with an Idempotency-Key header", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls++
	fail := p.rng.Float64() < p.failRate
	id, seen := p.charges[key]
	if !fail && !seen {
		id = "ch-" + key[len(key)-min(len(key), 12):]
		p.charges[key] = id
	}
	p.mu.Unlock()
	if fail {
		http.Error(w, "payment provider overloaded", http.StatusServiceUnavailable)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"charge_id": id, "replayed": seen})
}

// stats returns how many calls were made and how many charges exist.
func (p *paymentService) stats() (calls, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, len(p.charges)
}
