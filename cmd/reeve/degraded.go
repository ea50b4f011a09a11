package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/reeve-org/reeve/internal/workflow"
	"github.com/reeve-org/reeve/scheduler"
)

// degradedFlags are a scheduler's settings for overload and degraded modes:
// the default schedule-to-start timeout and the etcd space soft limit (see
// docs/degraded-modes.md).
type degradedFlags struct {
	scheduleToStart time.Duration
	quotaSoftLimit  float64
	ackTimeout      time.Duration
	sendQueueBytes  int64
	connsPerPeer    int
	maxTxnOps       int
	reclaimEvery    time.Duration
	reservePerStep  int64
	fireAhead       time.Duration
}

func (d *degradedFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&d.scheduleToStart, "schedule-to-start-timeout", time.Hour,
		"schedule-to-start timeout of steps whose workflow sets none: a queued step no agent claims within it is handed to the supervisor's policy; 0: wait for an agent indefinitely")
	f.Float64Var(&d.quotaSoftLimit, "quota-soft-limit", 0.8,
		"refuse new tasks (RESOURCE_EXHAUSTED) while etcd's database in use reaches this fraction of its quota; running tasks continue; 0: off")
	f.DurationVar(&d.ackTimeout, "ack-timeout", 5*time.Second,
		"an assignment an agent does not acknowledge within it is queued again for another agent (no failure counted) and the agent gets no work until it acknowledges one")
	f.Int64Var(&d.sendQueueBytes, "send-queue-bytes", 16<<20,
		"encoded bytes queued for one agent stream; an agent whose queue is full gets no new work")
	f.IntVar(&d.connsPerPeer, "max-connections-per-peer", 1000,
		"connections one client IP address may hold open; further ones are closed at once; 0: no cap (behind a load balancer that hides client addresses)")
	f.DurationVar(&d.reclaimEvery, "space-reclaim-interval", time.Minute,
		"while over --quota-soft-limit or under NOSPACE, compact etcd, defragment its members one at a time (each blocks meanwhile) and disarm NOSPACE once it fits, at most this often; 0: leave it to an operator")
	f.Int64Var(&d.reservePerStep, "space-reserve-per-step", 4<<10,
		"etcd bytes reserved for each queued or dispatched execution until it finishes: new tasks are refused while space in use + reserve reaches --quota-soft-limit; 0: reserve nothing")
	f.DurationVar(&d.fireAhead, "schedule-fire-ahead", scheduler.DefaultScheduleFireAhead,
		"how long before its time a schedule's run is fired, as a task that starts at the time (docs/schedules.md, firing ahead); 0: at the time; at most 1m")
	f.IntVar(&d.maxTxnOps, "etcd-max-txn-ops", 128,
		"etcd's --max-txn-ops (operations per transaction) as every member runs it: writes are batched to fit it and wider workflows are refused at registration; reeve dev runs its embedded etcd with it")
}

// options validates the flags and returns the scheduler options they imply.
func (d *degradedFlags) options() ([]scheduler.Option, error) {
	if v := d.scheduleToStart; v != 0 && (v < workflow.MinTimeout || v > workflow.MaxTimeout) {
		return nil, usagef("--schedule-to-start-timeout: %v is outside [%v, %v] (0: none)", v, workflow.MinTimeout, workflow.MaxTimeout)
	}
	if v := d.quotaSoftLimit; v < 0 || v > 1 {
		return nil, usagef("--quota-soft-limit: %v is outside [0, 1] (0: off)", v)
	}
	if v := d.ackTimeout; v < 100*time.Millisecond || v > time.Hour {
		return nil, usagef("--ack-timeout: %v is outside [100ms, 1h]", v)
	}
	if d.connsPerPeer < 0 {
		return nil, usagef("--max-connections-per-peer: %d is negative (0: no cap)", d.connsPerPeer)
	}
	if v := d.sendQueueBytes; v < 64<<10 {
		return nil, usagef("--send-queue-bytes: %d is below 65536", v)
	}
	if v := d.reservePerStep; v < 0 || v > 1<<30 {
		return nil, usagef("--space-reserve-per-step: %d is outside [0, 1 GiB]", v)
	}
	if v := d.fireAhead; v < 0 || v > scheduler.MaxScheduleFireAhead {
		return nil, usagef("--schedule-fire-ahead: %v is outside [0, %v]", v, scheduler.MaxScheduleFireAhead)
	}
	if v := d.maxTxnOps; v < 16 || v > 100000 {
		return nil, usagef("--etcd-max-txn-ops: %d is outside [16, 100000]", v)
	}
	return []scheduler.Option{scheduler.WithDefaultScheduleToStart(d.scheduleToStart), scheduler.WithSpaceSoftLimit(d.quotaSoftLimit),
		scheduler.WithAckTimeout(d.ackTimeout), scheduler.WithSendQueueBytes(d.sendQueueBytes), scheduler.WithMaxConnectionsPerPeer(d.connsPerPeer),
		scheduler.WithEtcdMaxTxnOps(d.maxTxnOps), scheduler.WithSpaceReclaim(d.reclaimEvery), scheduler.WithSpaceReserve(d.reservePerStep),
		scheduler.WithScheduleFireAhead(d.fireAhead)}, nil
}
