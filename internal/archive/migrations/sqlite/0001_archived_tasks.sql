-- The archive of finished tasks (docs/archive.md), in one plain table: one
-- row per (namespace, id). record is the last column so that a list, which
-- does not read it, does not read its overflow pages either.
CREATE TABLE archived_tasks (
    namespace  TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    workflow   TEXT    NOT NULL,
    state      INTEGER NOT NULL,
    created_ns INTEGER NOT NULL,
    ended_ns   INTEGER NOT NULL,
    summary    BLOB    NOT NULL,
    record     BLOB    NOT NULL,
    PRIMARY KEY (namespace, id)
);

-- The lists, newest first (created_ns DESC, id ASC), keyset paged.
CREATE INDEX archived_tasks_ns_created ON archived_tasks (namespace, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_state_created ON archived_tasks (namespace, state, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_wf_state_created ON archived_tasks (namespace, workflow, state, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_wf_created ON archived_tasks (namespace, workflow, created_ns DESC, id);
-- Retention: DropEndedBefore deletes by ended time in batches.
CREATE INDEX archived_tasks_ended ON archived_tasks (ended_ns);
