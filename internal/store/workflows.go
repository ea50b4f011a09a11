package store

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// PutWorkflow stores w as the next version of its name, unless it equals the
// latest version (same fingerprint), which is then returned with created=false.
// w.version is set by the store.
func (s *Store) PutWorkflow(ctx context.Context, w *reevev1.Workflow, fingerprint func(*reevev1.Workflow) []byte) (stored *reevev1.Workflow, created bool, err error) {
	for range maxUpdateRetries {
		latest, err := s.GetWorkflow(ctx, w.GetNamespace(), w.GetName(), 0)
		var next int32 = 1
		switch {
		case err == nil:
			if bytes.Equal(fingerprint(latest), fingerprint(w)) {
				return latest, false, nil
			}
			next = latest.GetVersion() + 1
		case !IsNotFound(err):
			return nil, false, err
		}
		w = proto.Clone(w).(*reevev1.Workflow)
		dropVersionField(w) // what this Reeve writes is version 1
		w.Version = next
		key := s.k.workflow(w.GetNamespace(), w.GetName(), next)
		val, err := marshal(w)
		if err != nil {
			return nil, false, err
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.c.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, val)).Commit()
		cancel()
		if err != nil {
			return nil, false, etcdErr(ctx, "put workflow", err)
		}
		if resp.Succeeded {
			s.workflows.put(s.k.workflowVersions(w.GetNamespace(), w.GetName()), key, proto.Clone(w).(*reevev1.Workflow), len(val), true)
			return w, true, nil
		}
	}
	return nil, false, fmt.Errorf("put workflow %s: %w", w.GetName(), ErrConflict)
}

// GetWorkflow returns one version of a workflow; version 0 means the latest.
// The read is linearizable (and fills the workflow cache: see
// workflowcache.go).
func (s *Store) GetWorkflow(ctx context.Context, ns, name string, version int32) (*reevev1.Workflow, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	var resp *clientv3.GetResponse
	var err error
	if version > 0 {
		resp, err = s.c.Get(octx, s.k.workflow(ns, name, version))
	} else {
		prefix := s.k.workflowVersions(ns, name)
		resp, err = s.c.Get(octx, prefix, clientv3.WithRange(prefixEnd(prefix)),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	}
	if err != nil {
		return nil, etcdErr(ctx, "get workflow", err)
	}
	if len(resp.Kvs) == 0 {
		if version > 0 {
			return nil, notFound(KindWorkflow, ns, name, "workflow %q version %d in namespace %q", name, version, ns)
		}
		return nil, notFound(KindWorkflow, ns, name, "workflow %q in namespace %q", name, ns)
	}
	kv := resp.Kvs[0]
	w, err := unmarshalWorkflow(kv.Value)
	if err != nil {
		return nil, err
	}
	s.workflows.put(s.k.workflowVersions(ns, name), string(kv.Key), proto.Clone(w).(*reevev1.Workflow), len(kv.Value), version == 0)
	return w, nil
}

// WorkflowForSubmit returns a copy of the workflow version a submission
// runs, from the workflow cache when it can (see workflowcache.go), else as
// GetWorkflow. For version 0 it returns the latest version this store knows,
// which may be stale: latest is true then, and the task must be created
// with CreateTaskOfLatest, whose transaction checks that no newer version
// exists. A workflow stored in a version this Reeve does not know (a newer
// Reeve's: it may have steps this one would run wrongly) is refused with
// ErrUnknownVersion.
func (s *Store) WorkflowForSubmit(ctx context.Context, ns, name string, version int32) (w *reevev1.Workflow, latest bool, err error) {
	w, latest, err = s.workflowForSubmit(ctx, ns, name, version)
	if err != nil {
		return nil, false, err
	}
	if err := s.submittable(ns, name, w); err != nil {
		return nil, false, err
	}
	return w, latest, nil
}

// LatestWorkflowForSubmit is GetWorkflow of the latest version (a
// linearizable read) for a submission: a workflow stored in a version this
// Reeve does not know is refused with ErrUnknownVersion, as by
// WorkflowForSubmit.
func (s *Store) LatestWorkflowForSubmit(ctx context.Context, ns, name string) (*reevev1.Workflow, error) {
	w, err := s.GetWorkflow(ctx, ns, name, 0)
	if err != nil {
		return nil, err
	}
	if err := s.submittable(ns, name, w); err != nil {
		return nil, err
	}
	return w, nil
}

// submittable refuses a workflow of an unknown version (versions.go).
func (s *Store) submittable(ns, name string, w *reevev1.Workflow) error {
	if v := unknownFieldVersion(w); !knownVersion(v) {
		return s.unknownVersion("submit task", &UnknownVersionError{Kind: KindWorkflow, Namespace: ns,
			Name: fmt.Sprintf("%s version %d", name, w.GetVersion()), Key: s.k.workflow(ns, name, w.GetVersion()), Version: v})
	}
	return nil
}

func (s *Store) workflowForSubmit(ctx context.Context, ns, name string, version int32) (w *reevev1.Workflow, latest bool, err error) {
	if version == 0 {
		v, ok := s.workflows.latestVersion(s.k.workflowVersions(ns, name))
		if !ok {
			w, err := s.GetWorkflow(ctx, ns, name, 0)
			return w, false, err
		}
		version, latest = v, true
	}
	if w, ok := s.workflows.version(s.k.workflow(ns, name, version)); ok {
		return w, latest, nil
	}
	if latest {
		// The version was evicted: read the latest afresh.
		w, err := s.GetWorkflow(ctx, ns, name, 0)
		return w, false, err
	}
	w, err = s.GetWorkflow(ctx, ns, name, version)
	return w, false, err
}

// ListWorkflows returns the latest version of up to limit workflows of a
// namespace in name order, starting after the name `after`, and at most
// DefaultListBytes of them (encoded) unless the first alone is larger.
func (s *Store) ListWorkflows(ctx context.Context, ns, after string, limit int) (wfs []*reevev1.Workflow, more bool, err error) {
	prefix := s.k.workflows(ns)
	start := prefix
	if after != "" {
		start = prefixEnd(prefix + after + "/")
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	// Registered workflows are few and change rarely; one keys-only range
	// over the namespace's versions finds each name's latest.
	resp, err := s.c.Get(octx, start, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithKeysOnly())
	if err != nil {
		return nil, false, etcdErr(ctx, "list workflows", err)
	}
	var latest []string
	for i, kv := range resp.Kvs {
		name := strings.SplitN(strings.TrimPrefix(string(kv.Key), prefix), "/", 2)[0]
		last := i == len(resp.Kvs)-1
		if last || !strings.HasPrefix(string(resp.Kvs[i+1].Key), prefix+name+"/") {
			latest = append(latest, string(kv.Key))
		}
	}
	if len(latest) > limit {
		latest, more = latest[:limit], true
	}
	bytes := 0
	for i, key := range latest {
		r, err := s.c.Get(octx, key, clientv3.WithRev(resp.Header.Revision))
		if err != nil {
			return nil, false, etcdErr(ctx, "list workflows", err)
		}
		if len(r.Kvs) == 0 {
			continue
		}
		// The page's byte budget, as ListTasks's: a page always holds one.
		n := len(r.Kvs[0].Value)
		if len(wfs) > 0 && bytes+n > DefaultListBytes {
			return wfs, more || i < len(latest), nil
		}
		bytes += n
		w, err := unmarshalWorkflow(r.Kvs[0].Value)
		if err != nil {
			return nil, false, err
		}
		wfs = append(wfs, w)
	}
	return wfs, more, nil
}

func unmarshalWorkflow(b []byte) (*reevev1.Workflow, error) {
	w := &reevev1.Workflow{}
	if err := proto.Unmarshal(b, w); err != nil {
		return nil, fmt.Errorf("store: decode workflow: %w", err)
	}
	return w, nil
}
