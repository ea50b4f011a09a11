package store_test

import (
	"testing"
	"time"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// The keys the chaos checker, the benchmarks and the failover measurement
// read are the ones the store writes (keys.go), below any prefix.
func TestLayoutNamesTheStoresKeys(t *testing.T) {
	at := time.Unix(0, 1764000000123456789)
	def, other := store.NewLayout(""), store.NewLayout("/other/")
	cases := []struct{ got, want string }{
		{def.Task("default", "t-1"), "/reeve/tasks/default/t-1"},
		{def.Tasks("default"), "/reeve/tasks/default/"},
		{def.Tasks(""), "/reeve/tasks/"},
		{def.Deadlines(), "/reeve/deadlines/"},
		{def.Deadline(at, "default", "t-1", "a", 2), "/reeve/deadlines/01764000000123456789/default/t-1/a/2"},
		{def.CreatedState("default", reevev1.TaskState_TASK_STATE_RUNNING), "/reeve/created-state/default/TASK_STATE_RUNNING/"},
		{def.Alerts("default"), "/reeve/alerts/default/"},
		{def.Agents("default"), "/reeve/agents/default/"},
		{def.Agents(""), "/reeve/agents/"},
		{def.ElectionCandidates(), "/reeve/supervisor/election/"},
		{other.Task("ns", "t-2"), "/other/tasks/ns/t-2"},
		{other.Tasks(""), "/other/tasks/"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
