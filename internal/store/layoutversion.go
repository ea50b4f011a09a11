package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LayoutVersion is the version of the key layout (keys.go) this Reeve
// reads and writes. It is kept in meta/layout-version under the prefix; an
// etcd without that key was written by a Reeve from before the key
// existed, whose layout is version 1. A Reeve that changes the layout in a
// way older ones would misread writes a higher version, and older ones then
// refuse to start (docs/operations.md, "Upgrades and rollbacks").
const LayoutVersion = 1

// ErrLayoutTooNew means the key layout under the prefix is of a version
// newer than this Reeve knows: it must not read or write there.
var ErrLayoutTooNew = errors.New("store: etcd layout is newer than this Reeve knows")

// LayoutError is a refusal to use a layout newer than LayoutVersion; it
// matches ErrLayoutTooNew.
type LayoutError struct {
	// Prefix is the store's key prefix; Found the version stored there.
	Prefix string
	Found  uint64
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("etcd layout version %d under prefix %q is newer than this Reeve knows (%d): upgrade Reeve, or point it at another --prefix",
		e.Found, e.Prefix, LayoutVersion)
}

// Is makes a LayoutError match ErrLayoutTooNew.
func (e *LayoutError) Is(target error) bool { return target == ErrLayoutTooNew }

// CheckLayout checks the layout version under the store's prefix, once:
// when the key is absent it writes LayoutVersion with a create-only
// transaction (an etcd written by an older Reeve, or an empty one, has
// layout 1); when it holds LayoutVersion it returns nil; when it holds a
// newer version, a *LayoutError. A value that is not a version number is
// refused too. Every process that writes through a store calls it (through
// AwaitLayout) before its first write.
//
// When etcd is out of space and the key is absent, the write fails; the
// layout is then this Reeve's (a newer Reeve writes the key before anything
// else), and CheckLayout returns nil without writing it: the next start
// writes it.
func (s *Store) CheckLayout(ctx context.Context) error {
	key := s.k.layoutVersion()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, strconv.Itoa(LayoutVersion))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		err = etcdErr(ctx, "check layout version", err)
		if !errors.Is(err, ErrNoSpace) {
			return err
		}
		// etcd refuses any transaction that may write; a read does.
		val, ok, rerr := s.readLayout(ctx)
		if rerr != nil || !ok {
			return rerr
		}
		return s.judgeLayout(val)
	}
	if resp.Succeeded {
		return nil
	}
	// The compare failed: the key exists, and the Else read it in the
	// same transaction.
	var val []byte
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		val = kvs[0].Value
	}
	return s.judgeLayout(val)
}

// judgeLayout returns nil for a stored layout version this Reeve uses.
func (s *Store) judgeLayout(val []byte) error {
	v, err := strconv.ParseUint(string(val), 10, 64)
	if err != nil || v == 0 {
		return fmt.Errorf("etcd layout version under prefix %q is %q, not a version number: refusing to use it (was it written by a newer Reeve?): %w",
			s.k.prefix, val, ErrLayoutTooNew)
	}
	if v > LayoutVersion {
		return &LayoutError{Prefix: s.k.prefix, Found: v}
	}
	return nil
}

// LayoutVersion reads the layout version under the store's prefix without
// writing: ok is false when the key is absent (layout 1, or an empty
// etcd). A value that is not a version number is an error.
func (s *Store) LayoutVersion(ctx context.Context) (version uint64, ok bool, err error) {
	val, ok, err := s.readLayout(ctx)
	if err != nil || !ok {
		return 0, false, err
	}
	v, err := strconv.ParseUint(string(val), 10, 64)
	if err != nil || v == 0 {
		return 0, true, fmt.Errorf("etcd layout version under prefix %q is %q, not a version number", s.k.prefix, val)
	}
	return v, true, nil
}

func (s *Store) readLayout(ctx context.Context) (val []byte, ok bool, err error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.c.Get(octx, s.k.layoutVersion())
	if err != nil {
		return nil, false, etcdErr(ctx, "read layout version", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// AwaitLayout is CheckLayout, tried again every second while etcd cannot
// be reached (each failure logged), until it answers or ctx ends: a
// process started before etcd waits for it, and one started against a
// newer layout refuses to start. Once it succeeded it returns nil at once.
func (s *Store) AwaitLayout(ctx context.Context) error {
	if s.layoutChecked.Load() {
		return nil
	}
	for {
		err := s.CheckLayout(ctx)
		if err == nil {
			s.layoutChecked.Store(true)
			return nil
		}
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		s.log.Warn("cannot check etcd's layout version yet; trying again", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
