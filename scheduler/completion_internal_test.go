package scheduler

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

func testKey(t testing.TB) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// A token names its attempt and verifies only against the task (and create
// time) and key it was made with; any byte changed breaks it.
func TestCompletionTokenRoundTrip(t *testing.T) {
	key := testKey(t)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	task := &reevev1.Task{Namespace: "shop", Id: "order-42", CreateTime: timestamppb.New(created)}
	tok := makeToken(key, task, "approve", 3)
	if !strings.HasPrefix(tok, tokenPrefix) || len(tok) > maxTokenLen {
		t.Fatalf("token %q", tok)
	}
	r, err := parseToken(tok)
	if err != nil || r.ns != "shop" || r.id != "order-42" || r.step != "approve" || r.attempt != 3 {
		t.Fatalf("parse: %+v, %v", r, err)
	}
	if !r.verify(key, task) {
		t.Fatal("the token does not verify against its task")
	}
	reused := &reevev1.Task{Namespace: "shop", Id: "order-42", CreateTime: timestamppb.New(created.Add(time.Nanosecond))}
	if r.verify(key, reused) {
		t.Fatal("the token verifies against a later task of the same id")
	}
	if r.verify(testKey(t), task) {
		t.Fatal("the token verifies under another key")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, tokenPrefix))
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 0x01
		r, err := parseToken(tokenPrefix + base64.RawURLEncoding.EncodeToString(b))
		if err == nil && r.verify(key, task) {
			t.Fatalf("a token with byte %d changed verifies", i)
		}
	}
}

// parseToken never panics, and refuses what it cannot read with the one
// answer, errBadToken.
func FuzzParseToken(f *testing.F) {
	key := make([]byte, 32)
	task := &reevev1.Task{Namespace: "default", Id: "t", CreateTime: timestamppb.New(time.Unix(1, 0))}
	f.Add(makeToken(key, task, "s", 1))
	f.Add("rvt1.")
	f.Add("rvt1.AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		r, err := parseToken(tok)
		if err != nil {
			if err != errBadToken {
				t.Fatalf("error %v, want errBadToken", err)
			}
			return
		}
		if r.ns == "" || r.id == "" || r.step == "" || r.attempt < 1 || len(r.mac) != 32 {
			t.Fatalf("accepted %q as %+v", tok, r)
		}
		_ = r.verify(key, task)
	})
}
