package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// Format 1 is frozen: records written with it live in etcd for as long as
// their tasks do, so its dictionary never changes. A better dictionary is a
// new format byte (recordcodec.go).
func TestRecordDictionaryIsFrozen(t *testing.T) {
	sum := sha256.Sum256(recordDict1)
	if got, want := hex.EncodeToString(sum[:]), "83800ef4c1dbec616d83c6a9d46151b3982c9ebfa7b5a980d488df04d9ad1211"; got != want {
		t.Fatalf("record-zstd1.dict has SHA-256 %s, want %s: records in etcd were compressed with the original; add a new format instead", got, want)
	}
}

// A record compressed when format 1 was made (testdata, written by a
// store with WithRecordCompression) still decodes to the same bytes.
func TestRecordFormat1StillDecodes(t *testing.T) {
	plain, err := os.ReadFile("testdata/record-plain.pb")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := os.ReadFile("testdata/record-zstd1.bin")
	if err != nil {
		t.Fatal(err)
	}
	if stored[0] != recordMarker || stored[1] != recordZstd1 {
		t.Fatalf("testdata starts with % x, want the format 1 header", stored[:2])
	}
	got, err := recordProto(stored)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("decoded %d bytes, %v; want the %d plain bytes", len(got), err, len(plain))
	}
	var rec storev1.TaskRecord
	if err := UnmarshalRecord(stored, &rec); err != nil || rec.GetTask().GetId() == "" {
		t.Fatalf("UnmarshalRecord: %v, task %q", err, rec.GetTask().GetId())
	}
}

func TestCompressRecordRoundTripsAndShrinks(t *testing.T) {
	plain, err := os.ReadFile("testdata/record-plain.pb")
	if err != nil {
		t.Fatal(err)
	}
	stored := compressRecord(string(plain))
	if len(stored)*2 > len(plain) {
		t.Fatalf("a %d-byte record of the bench workflow compressed to %d bytes, want at most half", len(plain), len(stored))
	}
	got, err := recordProto([]byte(stored))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("round trip: %v", err)
	}
	// A plain record passes through untouched, whatever it holds.
	if got, err := recordProto(plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("plain record: %v", err)
	}
}

// A record that does not shrink (random bytes in its input, say) is
// stored plain: compression never makes a record larger.
func TestCompressRecordKeepsWhatDoesNotShrink(t *testing.T) {
	noise := make([]byte, 512)
	for i, x := 0, uint32(1); i < len(noise); i++ { // xorshift: bytes no dictionary predicts
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		noise[i] = byte(x)
	}
	rec := &storev1.TaskRecord{RequestDigest: noise}
	b, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := compressRecord(string(b)); got != string(b) {
		t.Fatalf("a %d-byte record was stored as %d bytes, want it plain", len(b), len(got))
	}
}

func TestRecordProtoRefusesWhatItCannotRead(t *testing.T) {
	plain, err := os.ReadFile("testdata/record-plain.pb")
	if err != nil {
		t.Fatal(err)
	}
	stored := []byte(compressRecord(string(plain)))
	// A zstd frame of 3 MiB of zeros: more than a record may decode to.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(recordDict1ID, recordDict1))
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.EncodeAll(make([]byte, 3<<20), []byte{recordMarker, recordZstd1})
	for _, c := range []struct {
		name string
		val  []byte
		want string
	}{
		{"unknown format", []byte{recordMarker, 0x02, 1, 2, 3}, "unknown record format"},
		{"header only", []byte{recordMarker}, "unknown record format"},
		{"truncated frame", stored[:len(stored)-5], "decompress record"},
		{"over the size bound", bomb, "decompress record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := recordProto(c.val)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
			if c.name == "unknown format" && !errors.Is(err, errRecordFormat) {
				t.Fatalf("err %v is not errRecordFormat", err)
			}
		})
	}
}

// Whatever bytes a task key holds (a corrupt value, a hand edit with
// etcdctl, a future format), reading it returns an error or a record:
// never a panic, and never more than maxDecodedRecord bytes decoded.
//
//	go test -run '^$' -fuzz FuzzUnmarshalRecord ./internal/store
func FuzzUnmarshalRecord(f *testing.F) {
	plain, err := os.ReadFile("testdata/record-plain.pb")
	if err != nil {
		f.Fatal(err)
	}
	stored := []byte(compressRecord(string(plain)))
	f.Add(plain)
	f.Add(stored)
	f.Add(stored[:len(stored)/2])
	f.Add([]byte{recordMarker})
	f.Add([]byte{recordMarker, recordZstd1})
	f.Add([]byte{recordMarker, 0xff, 0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, val []byte) {
		b, err := recordProto(val)
		if err != nil {
			return
		}
		if len(b) > maxDecodedRecord {
			t.Fatalf("decoded %d bytes, over the %d bound", len(b), maxDecodedRecord)
		}
		var rec storev1.TaskRecord
		_ = UnmarshalRecord(val, &rec)
		_, _ = decodeBasic(val)
	})
}
