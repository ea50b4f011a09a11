package store

import (
	"fmt"
	"testing"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
)

// The workflow cache stays within its bounds however many versions pass
// through it, and a "latest" whose version was evicted is a miss, never a
// wrong answer.
func TestWorkflowCacheStaysBounded(t *testing.T) {
	c := newWorkflowCache()
	for i := range 3 * maxWorkflowEntries {
		name := fmt.Sprintf("wf%d", i)
		c.put("p/"+name+"/", "p/"+name+"/1", &reevev1.Workflow{Name: name, Version: 1}, 1024, true)
	}
	if len(c.versions) > maxWorkflowEntries || len(c.latest) > maxWorkflowEntries+1 {
		t.Fatalf("%d versions and %d latest entries cached, bound %d", len(c.versions), len(c.latest), maxWorkflowEntries)
	}
	big := maxWorkflowCacheBytes / 16
	for i := range 64 {
		name := fmt.Sprintf("big%d", i)
		c.put("p/"+name+"/", "p/"+name+"/1", &reevev1.Workflow{Name: name, Version: 1}, big, true)
	}
	if c.bytes > maxWorkflowCacheBytes {
		t.Fatalf("%d bytes cached, bound %d", c.bytes, maxWorkflowCacheBytes)
	}
	c.put("p/huge/", "p/huge/1", &reevev1.Workflow{Name: "huge", Version: 1}, maxWorkflowCacheBytes, true)
	if _, ok := c.version("p/huge/1"); ok {
		t.Fatal("a version larger than an eighth of the cache was cached")
	}
	// Every latest entry still cached names a version that is either
	// cached or a miss: none names another version.
	for prefix, v := range c.latest {
		if w, ok := c.version(fmt.Sprintf("%s%d", prefix, v)); ok && w.GetVersion() != v {
			t.Fatalf("latest of %s is v%d, cached as v%d", prefix, v, w.GetVersion())
		}
	}
}
