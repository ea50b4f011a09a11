package store

import (
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
)

// How a task record is stored (the value of tasks/<ns>/<id>), in one of two
// formats that every reader accepts:
//
//   - plain: the TaskRecord's deterministic protobuf encoding. Its first byte
//     is a field's tag, never 0 (protobuf has no field number 0).
//   - compressed: the byte 0x00, a format byte, then the body. Format 1 is a
//     zstd frame (RFC 8878) compressed with the raw-content dictionary
//     record-zstd1.dict, dictionary id 1.
//
// A store writes compressed records when told to (WithRecordCompression),
// and then only when that is smaller. The dictionary (13.7 KB) is twelve
// records taken from a `reeve dev --demo` run: the final states of the
// demo workflows (succeeded, retried after a timeout, compensated), of an
// order workflow that succeeded, of one canceled while running and one
// canceled while queued, of one failed by schedule-to-start timeouts, and
// records of bench tasks of 1 step, 3 steps and a fan-out — the field tags,
// history kinds, actors, error codes and step fields that records repeat.
// A 1-step task's records shrink from about 500 to about 150 bytes, and
// every transition writes
// that much less to etcd's log, to each member, and to its database
// (docs/benchmarks.md, "Compressed records"). Format 1 and its dictionary
// are frozen: records written with them must stay readable, so a better
// dictionary is a new format byte, never an edit of this file.
const (
	recordMarker = 0x00
	recordZstd1  = 0x01
)

//go:embed record-zstd1.dict
var recordDict1 []byte

// recordDict1ID is the id the dictionary carries in each frame's header.
const recordDict1ID = 1

// maxDecodedRecord bounds what a compressed record may decode to: twice
// the largest record a store writes, so that a corrupt or hostile value
// cannot make a reader allocate without limit.
const maxDecodedRecord = 2 * MaxRecordBytes

var (
	recordEncoder = sync.OnceValue(func() *zstd.Encoder {
		// The fastest level, literals stored raw rather than Huffman
		// coded: about 5 µs per record of ~500 bytes on the 2-core box.
		// For records of a few KB, Huffman coding made nothing smaller
		// and took 40 % more time; the default level made them 10 %
		// smaller for twice the time. (S2 with the same dictionary was 4
		// times faster and 6–25 % larger; zstd is an RFC format that any
		// zstd tool given the dictionary reads.)
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithNoEntropyCompression(true),
			zstd.WithEncoderCRC(false), // etcd's log and database have their own checksums
			zstd.WithEncoderDictRaw(recordDict1ID, recordDict1),
			// A record is at most MaxRecordBytes: a window that size,
			// rather than the level's 4 MiB, and smaller tables keep
			// the encoders' memory down (one per core).
			zstd.WithWindowSize(MaxRecordBytes),
			zstd.WithLowerEncoderMem(true),
		)
		if err != nil {
			panic(err) // fixed, valid options
		}
		return e
	})
	recordDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderDictRaw(recordDict1ID, recordDict1),
			zstd.WithDecoderMaxMemory(maxDecodedRecord),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderConcurrency(0),
		)
		if err != nil {
			panic(err) // fixed, valid options
		}
		return d
	})
)

var errRecordFormat = errors.New("unknown record format")

// compressRecord returns the compressed form of a plain record encoding,
// or plain itself when compressing does not make it smaller.
func compressRecord(plain string) string {
	b := unsafe.Slice(unsafe.StringData(plain), len(plain))
	out := make([]byte, 2, len(plain)/2+16)
	out[0], out[1] = recordMarker, recordZstd1
	out = recordEncoder().EncodeAll(b, out)
	if len(out) >= len(plain) {
		return plain
	}
	return unsafe.String(unsafe.SliceData(out), len(out))
}

// recordProto returns the protobuf encoding of a stored record, plain or
// compressed.
func recordProto(val []byte) ([]byte, error) {
	if len(val) == 0 || val[0] != recordMarker {
		return val, nil
	}
	if len(val) < 2 || val[1] != recordZstd1 {
		return nil, errRecordFormat
	}
	out, err := recordDecoder().DecodeAll(val[2:], nil)
	if err != nil {
		return nil, fmt.Errorf("decompress record: %w", err)
	}
	return out, nil
}

// UnmarshalRecord decodes a stored task record (the value of a task key),
// in either format. For readers outside the store, such as reeve verify.
func UnmarshalRecord(val []byte, rec *storev1.TaskRecord) error {
	b, err := recordProto(val)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, rec)
}

// encodeRecordValue returns what a put of a record stores: its protobuf
// encoding (plain, already sized against MaxRecordBytes), compressed when
// the store compresses records.
func (s *Store) encodeRecordValue(plain string) string {
	if !s.compressRecords {
		return plain
	}
	return compressRecord(plain)
}
