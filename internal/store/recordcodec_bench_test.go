package store

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// BenchmarkRecordCompression compresses and decompresses the record of a
// 1-step bench task that succeeded (testdata/record-plain.pb), alone and
// with a JSON order as its input (items of sku, quantity, price, name and
// warehouse, random values) and a small output. It reports the record's
// size plain and stored, and the stored share in percent
// (docs/benchmarks.md, "Compressed records"):
//
//	go test -run '^$' -bench RecordCompression ./internal/store
func BenchmarkRecordCompression(b *testing.B) {
	plain, err := os.ReadFile("testdata/record-plain.pb")
	if err != nil {
		b.Fatal(err)
	}
	for _, items := range []int{0, 10, 50, 200} {
		rec := &storev1.TaskRecord{}
		if err := proto.Unmarshal(plain, rec); err != nil {
			b.Fatal(err)
		}
		if items > 0 {
			rec.Task.Input, rec.Task.Steps[0].Output = orderInput(b, items), orderOutput(b)
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
		if err != nil {
			b.Fatal(err)
		}
		stored := compressRecord(string(raw))
		report := func(b *testing.B) {
			b.ReportMetric(float64(len(raw)), "plain-bytes")
			b.ReportMetric(float64(len(stored)), "stored-bytes")
			b.ReportMetric(100*float64(len(stored))/float64(len(raw)), "stored-%")
		}
		b.Run(fmt.Sprintf("items=%d/compress", items), func(b *testing.B) {
			for b.Loop() {
				compressRecord(string(raw))
			}
			report(b)
		})
		b.Run(fmt.Sprintf("items=%d/decompress", items), func(b *testing.B) {
			for b.Loop() {
				if _, err := recordProto([]byte(stored)); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}

// orderInput is a JSON order of n items with random values (seeded: the
// same every run).
func orderInput(b *testing.B, n int) *structpb.Value {
	r := rand.New(rand.NewSource(int64(n)))
	list := make([]any, n)
	for i := range list {
		list[i] = map[string]any{
			"sku":       fmt.Sprintf("SKU-%06d", r.Intn(1_000_000)),
			"qty":       r.Intn(10) + 1,
			"price":     float64(r.Intn(100_000)) / 100,
			"name":      fmt.Sprintf("item %d of order", r.Intn(5000)),
			"warehouse": []string{"eu-west-1", "us-east-2", "ap-south-1"}[r.Intn(3)],
		}
	}
	doc := map[string]any{
		"order_id": fmt.Sprintf("o-%d", r.Intn(1e9)),
		"customer": map[string]any{"id": fmt.Sprintf("c-%d", r.Intn(1e6)), "email": "someone@example.com", "country": "DE"},
		"items":    list,
		"currency": "EUR",
	}
	return jsonValue(b, doc)
}

func orderOutput(b *testing.B) *structpb.Value {
	return jsonValue(b, map[string]any{"shipment": "sh-184467", "status": "ok"})
}

func jsonValue(b *testing.B, doc any) *structpb.Value {
	js, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	v := &structpb.Value{}
	if err := v.UnmarshalJSON(js); err != nil {
		b.Fatal(err)
	}
	return v
}
