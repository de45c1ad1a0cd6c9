"""Health-driven operations: faults recorded as events, judged by admins' rules, decisions recorded as data.

The loop, all of it run on ingest inside the transaction that records the event (the tray row locked):

1. **Events.** A discovery report's XIDs (mapped to the GPU whose PCI bus id the kernel line names), the
   GPUs' NVML recovery action and fabric health flags, failed active checks, and DCGM fields become
   `HealthEvent` rows. The same fault on the same GPU within `HealthSettings.dedup_window_s` of its last
   sighting updates that row (count, last seen) instead of adding one. Conditions a report restates every
   interval (a recovery action, a fabric flag, a DCGM gauge) refresh `last_seen` without counting up.
2. **Rules.** Every enabled `HealthRule` that matches acts: `drain` the tray, `degrade` its NVLink partition
   (an NVLink fault affects every tray of it), or `warn`. Each decision is a `HealthAction` row saying what,
   why and when.
3. **Drain.** A tray that is up is drained with a reason that says who and why (``rackplane: XID 79
   (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-... at ...``); the scheduler stops placing on it at once (a tray that
   is not up is never schedulable, and the state change asks for a pass: scheduling.signals). A tray that
   is already out for another owner's reason (an admin, a partition plan, Slurm) is left as it is. A
   repeat offender (HealthSettings.repeat_faults drains within repeat_days) goes to "needs service"
   instead, and never comes back by itself.
4. **Circuit breaker.** No more than `breaker_percent` % of all trays (at least one) are taken out by the
   rules per `breaker_window_s`: the next drain trips the breaker (an alert row), and every drain after it
   is recorded as blocked until an admin clears `breaker_tripped_at`.
5. **Dry run.** With `HealthSettings.dry_run` the decisions are recorded as "would drain" (and would
   degrade, would return) and nothing else changes.
6. **Return to service.** A tray the rules drained returns when its agent has reported it healthy for
   `return_after_s` and, when `return_check` names an active check, that check passed after the fault.

Backends: `drain_tray` and `return_to_service` are the one way a tray's health state changes; each sends
`tray_health_changed` once the transaction commits, and the tray's save is heard by integrations.signals.
What connects there: the drain pushed to Slurm (`scontrol update ... State=DRAIN Reason=...`, never
overwriting another owner's reason) and Kubernetes (cordon + taint) by integrations.trays, and the tray's
running jobs handled by their class's policy (wait, checkpoint then requeue, or requeue at once:
scheduling.requeue, through integrations.requeue). Nothing here talks to the outside world. Notifications
are recorded here (core.notifications); `breaker_tripped` is sent like `tray_health_changed`.

Degraded partitions: the scheduling pass reads `NVLinkPartition.degraded_reason` (scheduling.pass_cluster) and
places no job spanning trays on a degraded partition; the pending reason names the degradation.

Modules, in the order they import one another (each only from the ones above it):

- `events`: observations from a report or DCGM samples, deduplicated into `HealthEvent` rows (step 1);
  active checks' results kept.
- `actions`: `HealthAction` rows, the tray state change and `tray_health_changed`, `drain_tray`, the
  reasons' wording (`REASON_PREFIX`, `typed_text_problem`) and `HealthError`.
- `rules`: matching `HealthRule`s and their decisions: drain, degrade and recover, warn, the circuit breaker
  (`breaker_tripped`, `reset_breaker`), dry run, repeat offenders (steps 2-5); `seed_default_rules`.
- `service`: service and RMA tracking (`mark_service`, `open_mark`): an admin's marks, which keep a tray out
  of service until it is marked returned.
- `returns`: return to service: `return_eligibility`, the rules' own return, `return_to_service` (step 6).
- `ingest`: the entry points that run the loop: `record_report_health`, `record_dcgm`,
  `record_admin_event`.
- `timeline`: what a tray's or GPU's page shows (`timeline`, `latest_checks`).
- `centre`: the health centre's reads (the fleet's events a keyset page at a time, events over time, the
  repeat offenders).
"""
