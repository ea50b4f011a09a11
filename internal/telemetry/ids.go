package telemetry

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// IDGenerator returns the span id generator Reeve's tracer providers need:
// random ids, except for a span started with a context from WithSpanID,
// which gets the requested id (attempt spans, see AttemptSpanContext). Pass
// it to sdktrace.WithIDGenerator when building your own TracerProvider;
// Setup does. With another generator attempt spans get random ids and the
// links between attempts point to spans that do not exist.
func IDGenerator() sdktrace.IDGenerator {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return &idGenerator{rng: rand.New(rand.NewChaCha8(seed))}
}

type idGenerator struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (g *idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], g.rng.Uint64())
		binary.BigEndian.PutUint64(tid[8:], g.rng.Uint64())
	}
	return tid, g.random()
}

func (g *idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	// The requested id applies to the span started with ctx, not to its
	// children (whose parent is then that very span).
	if id, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok && trace.SpanContextFromContext(ctx).SpanID() != id {
		return id
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.random()
}

func (g *idGenerator) random() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], g.rng.Uint64())
	}
	return sid
}
