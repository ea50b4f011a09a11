package bench

// Report is the outcome of a run. Latencies are in milliseconds.
type Report struct {
	Mode        string  `json:"mode"`
	Tasks       int     `json:"tasks"`
	Steps       int     `json:"steps"`
	Shape       string  `json:"shape"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate"`
	Agents      int     `json:"agents"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	// Errors counts tasks whose submission failed (but for a refusal) or
	// that did not complete before the run ended; FirstError is the first
	// such error.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Accepted counts submissions that succeeded; Refused those refused
	// with RESOURCE_EXHAUSTED (shedding, rate and space limits), which are
	// not errors and not in the latency figures; RefusedReasons counts them
	// by ErrorInfo reason. RefusalP50Ms and RefusalP99Ms are the latency of
	// the refused SubmitTask calls. Open loop drops a refused task; closed
	// loop waits the refusal's RetryInfo delay (20 ms without one) and sends
	// it again, timing the task from its admitted submission (a flood check,
	// Config.QuotaBytes, waits 20 ms and moves on to its next task).
	Accepted       int            `json:"accepted"`
	Refused        int            `json:"refused"`
	RefusedReasons map[string]int `json:"refused_reasons,omitempty"`
	RefusalP50Ms   float64        `json:"refusal_p50_ms"`
	RefusalP99Ms   float64        `json:"refusal_p99_ms"`
	// AgentsStopped counts agents whose Run ended with an error during the
	// run (their steps then wait for the supervisor); AgentError is the first.
	AgentsStopped   int     `json:"agents_stopped"`
	AgentError      string  `json:"agent_error,omitempty"`
	DurationSec     float64 `json:"duration_sec"`
	TasksPerSec     float64 `json:"tasks_per_sec"`
	P50Ms           float64 `json:"p50_ms"`
	P95Ms           float64 `json:"p95_ms"`
	P99Ms           float64 `json:"p99_ms"`
	MaxMs           float64 `json:"max_ms"`
	QueueWaitP50Ms  float64 `json:"queue_wait_p50_ms"`
	QueueWaitP99Ms  float64 `json:"queue_wait_p99_ms"`
	DispatchP50Ms   float64 `json:"dispatch_p50_ms"`
	DispatchP99Ms   float64 `json:"dispatch_p99_ms"`
	EtcdTxnsPerTask float64 `json:"etcd_txns_per_task"`
	// EtcdBytesPerTask, EtcdOpsPerTask and EtcdPutBytesPerTask are what one
	// etcd member wrote during the load per completed task: bytes appended
	// to its write-ahead log (etcd_disk_wal_write_bytes_total: raft entries
	// with their framing, and raft hard states), key writes applied (puts
	// plus deletes, etcd_mvcc_put_total + etcd_mvcc_delete_total) and the
	// key and value bytes of those puts
	// (etcd_debugging_mvcc_total_put_size_in_bytes). Every member writes
	// the same log; a running target's are read from the /metrics of its
	// leader among EtcdEndpoints (the first endpoint when none is).
	EtcdBytesPerTask    float64 `json:"etcd_bytes_per_task"`
	EtcdOpsPerTask      float64 `json:"etcd_ops_per_task"`
	EtcdPutBytesPerTask float64 `json:"etcd_put_bytes_per_task"`
	EtcdDBStartMB       float64 `json:"etcd_db_start_mb,omitempty"`
	EtcdDBMaxMB         float64 `json:"etcd_db_max_mb,omitempty"`
	EtcdDBEndMB         float64 `json:"etcd_db_end_mb,omitempty"`
	// EtcdDBInUseMB is the part of etcd's database in use (not free pages
	// left by compaction) every 10 s of the run: flat when retention and
	// compaction keep up.
	EtcdDBInUseMB    []float64 `json:"etcd_db_in_use_mb,omitempty"`
	ProcessCPUSec    float64   `json:"process_cpu_sec,omitempty"`
	ProcessPeakRSSMB float64   `json:"process_peak_rss_mb,omitempty"`
	ServerCPUSec     float64   `json:"server_cpu_sec,omitempty"`
	ServerPeakRSSMB  float64   `json:"server_peak_rss_mb,omitempty"`
	// Windows gives the latency of the tasks completed in each 5 s of the
	// run, in order, empty windows included.
	Windows []Window `json:"windows"`
	// AllocsPerTask and AllocBytesPerTask are the Go heap allocations of
	// this process during the load (runtime.MemStats Mallocs and TotalAlloc
	// deltas) per completed task; GCCPUFraction is the share of the Go
	// CPU time of the process the runtime spent in garbage collection
	// (runtime/metrics /cpu/classes), and GCCycles how many GC cycles ran.
	// Embedded mode only: then they cover etcd, the scheduler and the load
	// generator, which share the process.
	AllocsPerTask     float64  `json:"allocs_per_task,omitempty"`
	AllocBytesPerTask float64  `json:"alloc_bytes_per_task,omitempty"`
	GCCPUFraction     *float64 `json:"gc_cpu_fraction,omitempty"` // set in embedded mode, even when 0
	GCCycles          int      `json:"gc_cycles,omitempty"`
	// Flood is set when the run had a quota (Config.QuotaBytes).
	Flood *FloodReport `json:"flood,omitempty"`

	// Archive tells whether the run had an archive (Config.ArchiveDSN);
	// ArchiveDSN is its DSN without passwords ("pg: postgres://…" for a
	// throwaway server).
	Archive    bool   `json:"archive"`
	ArchiveDSN string `json:"archive_dsn,omitempty"`
	// ArchiveTasks is how many tasks the archive gained during the run
	// (from the load's start to the report, after ArchiveWait), and
	// ArchiveBytesPerTask how much its size on disk (archive.Stats: table
	// and indexes) grew per task gained.
	ArchiveTasks        int64   `json:"archive_tasks"`
	ArchiveBytesPerTask float64 `json:"archive_bytes_per_task"`
	// ArchiveWaitSec is how long the run waited after the load for the
	// tasks to move to the archive (Config.ArchiveWait).
	ArchiveWaitSec float64 `json:"archive_wait_sec,omitempty"`
	// EtcdTasksAtEnd is how many task records etcd holds at the report
	// (after ArchiveWait), EtcdDBInUseEndMB the part of its database in
	// use then, and EtcdInUseBytesPerTask their ratio (0 when no task is
	// left): the etcd bytes a task costs while it is kept there.
	EtcdTasksAtEnd        int64   `json:"etcd_tasks_at_end"`
	EtcdDBInUseEndMB      float64 `json:"etcd_db_in_use_end_mb"`
	EtcdInUseBytesPerTask float64 `json:"etcd_in_use_bytes_per_task"`
	// LostChecked is how many acknowledged tasks were looked up after the
	// load (Config.VerifyLost), LostSample "all" or "random" (a random
	// LostSample of them when more than LostCheckAll were acknowledged),
	// and Lost how many of those were neither in etcd nor in the archive;
	// FirstLost names one.
	LostChecked int    `json:"lost_checked,omitempty"`
	LostSample  string `json:"lost_sample,omitempty"`
	Lost        int    `json:"lost"`
	FirstLost   string `json:"first_lost,omitempty"`
}

// FloodReport is the outcome of a flood against a small etcd quota: did
// admission refuse what etcd could not hold, and did everything it
// accepted finish?
type FloodReport struct {
	QuotaBytes int64 `json:"quota_bytes"`
	// Accepted counts submissions that succeeded, Refused those refused
	// with RESOURCE_EXHAUSTED, Completed the accepted tasks that ended
	// (succeeded or not) by the end of the drain, and Lost the accepted
	// ones that did not.
	Accepted  int `json:"accepted"`
	Refused   int `json:"refused"`
	Completed int `json:"completed"`
	Lost      int `json:"lost"`
	// NoSpaceRaised tells whether etcd's NOSPACE alarm was seen at any
	// time (the alarm list is read every second), NoSpaceAtEnd whether it
	// was still raised after the drain.
	NoSpaceRaised bool `json:"nospace_raised"`
	NoSpaceAtEnd  bool `json:"nospace_at_end"`
	// PeakDBFraction is the largest database file size seen (sampled every
	// second) over the quota; PeakInUseFraction the same for the part in
	// use.
	PeakDBFraction    float64 `json:"peak_db_fraction"`
	PeakInUseFraction float64 `json:"peak_in_use_fraction"`
}
