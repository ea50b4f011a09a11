-- The archive of finished tasks (docs/archive.md). One row per (namespace,
-- id): Put deletes a row of the same task with another ended_ns in the
-- transaction that upserts it (a partitioned table's unique key must hold
-- the partition key). Partitioned by UTC day of ended_ns: the partitions,
-- archived_tasks_YYYYMMDD, are created on demand by Put and dropped whole by
-- DropEndedBefore. Text columns are COLLATE "C": ids order and match by
-- bytes, as etcd's keys do, whatever the database's locale.
CREATE TABLE archived_tasks (
    created_ns bigint   NOT NULL,
    ended_ns   bigint   NOT NULL,
    state      smallint NOT NULL,
    namespace  text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    workflow   text COLLATE "C" NOT NULL,
    summary    bytea    NOT NULL,
    record     bytea    NOT NULL,
    -- Also the index of Get and Has: (namespace, id) is its prefix.
    PRIMARY KEY (namespace, id, ended_ns)
) PARTITION BY RANGE (ended_ns);

-- The lists, newest first (created_ns DESC, id ASC), keyset paged.
CREATE INDEX archived_tasks_ns_created ON archived_tasks (namespace, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_state_created ON archived_tasks (namespace, state, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_wf_state_created ON archived_tasks (namespace, workflow, state, created_ns DESC, id);
CREATE INDEX archived_tasks_ns_wf_created ON archived_tasks (namespace, workflow, created_ns DESC, id);
