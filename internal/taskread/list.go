package taskread

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	reevev1 "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/archive"
	storev1 "github.com/reeve-org/reeve/internal/gen/reeve/store/v1"
	"github.com/reeve-org/reeve/internal/store"
)

// List returns a page of q across both stores, newest first, and the ids
// of the page's tasks that came from the archive. full reads archived tasks
// whole (their records), otherwise in basic view (their summaries);
// q.Trim applies to them too.
//
// etcd is read first (store.QueryTasks), the archive second: a task moves to
// the archive before it leaves etcd, so a task of the stretch is in at least
// one of the two reads; one in both (moving) is listed once, as etcd has it.
// Where the etcd page stopped early (its byte or scan budget), the merged
// page stops there too, so that the next page, which starts after the last
// task listed, skips no etcd task.
//
// With an archive, the etcd page also holds the tasks that ended without
// created keys and wait to move (store.TaskQuery.Unindexed: with an archive
// a scheduler ends SUCCEEDED, COMPENSATED and CANCELED tasks so), read from
// the ended index in the same snapshot as the rest of the etcd page. When
// that index holds more than its budget (the archive far behind), the list
// fails as when the archive cannot answer (an *ArchiveError).
func (r *Reader) List(ctx context.Context, q store.TaskQuery, full bool) (store.TaskPage, []string, error) {
	q.Unindexed = r.a != nil
	page, err := r.st.QueryTasks(ctx, q)
	if errors.Is(err, store.ErrEndedBacklog) {
		return store.TaskPage{}, nil, &ArchiveError{err}
	}
	if err != nil || r.a == nil {
		return page, nil, err
	}
	return r.withArchived(ctx, q, full, page)
}

// withArchived merges into page, the etcd page of q, the archived tasks of
// the same stretch of the list: one page across both stores, newest first,
// and the ids of the page's tasks that came from the archive.
func (r *Reader) withArchived(ctx context.Context, q store.TaskQuery, full bool, page store.TaskPage) (store.TaskPage, []string, error) {
	aq := archive.Query{
		Namespace: q.Namespace, State: q.State, Workflow: q.Workflow,
		CreatedAfter: q.CreatedAfter, CreatedBefore: q.CreatedBefore, IDPrefix: q.IDPrefix, Labels: q.Labels,
		Limit: q.Limit, Full: full,
	}
	if q.After != nil {
		aq.After = &archive.Position{Created: q.After.Created, ID: q.After.ID}
	}
	rows, err := r.a.List(ctx, aq)
	if err != nil {
		return store.TaskPage{}, nil, archiveErr(err)
	}
	archived := make([]*reevev1.Task, 0, len(rows))
	for _, row := range rows {
		t, err := archivedListTask(row, full)
		if err != nil {
			return store.TaskPage{}, nil, archiveErr(err)
		}
		if q.Trim != nil {
			q.Trim(t)
		}
		archived = append(archived, t)
	}
	live := page.Tasks
	// etcd's page ends at page.Next when it has more: archived tasks past
	// that point wait for the next page.
	if page.Next != nil {
		cut := len(archived)
		for i, t := range archived {
			if listsBefore(*page.Next, positionOf(t)) {
				cut = i
				break
			}
		}
		archived = archived[:cut]
	}
	maxBytes := q.MaxBytes
	if maxBytes <= 0 {
		maxBytes = store.DefaultListBytes
	}
	out := store.TaskPage{Revision: page.Revision}
	var fromArchive []string
	size, i, j := 0, 0, 0
	for len(out.Tasks) < q.Limit && (i < len(live) || j < len(archived)) {
		var t *reevev1.Task
		isArchived := false
		if j == len(archived) || (i < len(live) && !listsBefore(positionOf(archived[j]), positionOf(live[i]))) {
			t = live[i]
			if j < len(archived) && samePosition(positionOf(archived[j]), positionOf(t)) {
				j++ // the same task, moving: etcd's copy is listed
			}
			i++
		} else {
			t, isArchived = archived[j], true
			j++
		}
		n := proto.Size(t)
		if len(out.Tasks) > 0 && size+n > maxBytes {
			i, j = -1, -1 // more remain
			break
		}
		out.Tasks = append(out.Tasks, t)
		if isArchived {
			fromArchive = append(fromArchive, t.GetId())
		}
		size += n
	}
	switch {
	case len(out.Tasks) == 0:
		out.Next = page.Next
	case i < 0 || i < len(live) || j < len(archived) || len(rows) == q.Limit:
		p := positionOf(out.Tasks[len(out.Tasks)-1])
		out.Next = &p
	case page.Next != nil:
		// Every task up to etcd's stopping point is listed.
		out.Next = page.Next
	}
	return out, fromArchive, nil
}

// archivedListTask decodes an archived row as a list returns it.
func archivedListTask(r archive.Task, full bool) (*reevev1.Task, error) {
	if full {
		rec := &storev1.TaskRecord{}
		if err := proto.Unmarshal(r.Record, rec); err != nil {
			return nil, err
		}
		return rec.GetTask(), nil
	}
	t := &reevev1.Task{}
	if err := proto.Unmarshal(r.Summary, t); err != nil {
		return nil, err
	}
	return t, nil
}

func positionOf(t *reevev1.Task) store.ListPosition {
	return store.ListPosition{Created: t.GetCreateTime().AsTime(), ID: t.GetId()}
}

func samePosition(a, b store.ListPosition) bool { return a.Created.Equal(b.Created) && a.ID == b.ID }

// listsBefore reports whether position a comes before b in a list: newer
// first, then by id (byte order, as etcd's keys and the archive's "C"
// collation sort).
func listsBefore(a, b store.ListPosition) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return a.ID < b.ID
}
