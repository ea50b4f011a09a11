package store

import (
	"sync"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// Workflow cache. A registered version is an immutable key
// (workflows/<ns>/<name>/<version>): PutWorkflow creates it with a compare
// that it does not exist and nothing in Reeve deletes or overwrites it. So a
// version read once can be served from memory for ever, and a submission
// needs no etcd read for its workflow:
//
//   - an explicit version is served from the cache, or read and cached;
//   - "latest" is the highest version this store has seen (read, or
//     registered through it). It may be stale: another scheduler may have
//     registered a newer one since. The task is therefore created with the
//     compare create_revision(workflows/<ns>/<name>/<v+1>) == 0 in its
//     transaction (CreateTaskOfLatest), which fails, writing nothing, if a
//     newer version exists; the caller then reads the latest linearizably
//     and creates the task on it.
//
// The cache holds at most maxWorkflowEntries versions and
// maxWorkflowCacheBytes of their encodings (a workflow may be 256 KiB); past
// either bound, random entries are evicted. A "latest" entry whose version
// was evicted is a miss. Not handled: an etcd restored from a backup older
// than a registration, or a version deleted or rewritten by hand (etcdctl)
// — restart the schedulers after either.
const (
	maxWorkflowEntries    = 4096
	maxWorkflowCacheBytes = 32 << 20
)

type workflowCache struct {
	mu       sync.Mutex
	versions map[string]cachedWorkflow // by version key
	latest   map[string]int32          // by versions prefix: the highest version seen
	bytes    int
}

type cachedWorkflow struct {
	w    *reevev1.Workflow // never modified: callers get clones
	size int
}

func newWorkflowCache() *workflowCache {
	return &workflowCache{versions: map[string]cachedWorkflow{}, latest: map[string]int32{}}
}

// version returns a copy of the cached version at key.
func (c *workflowCache) version(key string) (*reevev1.Workflow, bool) {
	c.mu.Lock()
	e, ok := c.versions[key]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	return proto.Clone(e.w).(*reevev1.Workflow), true
}

// latestVersion returns the highest version of a name this cache has seen.
func (c *workflowCache) latestVersion(prefix string) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.latest[prefix]
	return v, ok
}

// put caches w, stored at key, as a version of the name whose versions are
// under prefix; isLatest says it was the latest when read (or registered).
// w must not be modified afterwards.
func (c *workflowCache) put(prefix, key string, w *reevev1.Workflow, size int, isLatest bool) {
	if size > maxWorkflowCacheBytes/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if isLatest && w.GetVersion() > c.latest[prefix] {
		c.latest[prefix] = w.GetVersion()
	}
	if _, ok := c.versions[key]; ok {
		return
	}
	for k, e := range c.versions {
		if len(c.versions) < maxWorkflowEntries && c.bytes+size <= maxWorkflowCacheBytes {
			break
		}
		delete(c.versions, k)
		c.bytes -= e.size
	}
	if len(c.latest) > maxWorkflowEntries {
		clear(c.latest)
	}
	c.versions[key] = cachedWorkflow{w: w, size: size}
	c.bytes += size
}

// stale forgets that version v of the name under prefix was the latest (a
// newer one exists).
func (c *workflowCache) stale(prefix string, v int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latest[prefix] == v {
		delete(c.latest, prefix)
	}
}
