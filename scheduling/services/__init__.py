"""Jobs' multi-object workflows, one module per job; import from the module, never from this package.

* admission: submitting a job (its checks against the inventory, department and project; the
  Idempotency-Key and its fingerprint); the departments a person may submit to.
* pass_requests: asking for a scheduling pass (a row, then one task on commit, coalesced per transaction).
* passes: running the pass (one at a time, under the SchedulerState row lock) and its summary.
* pass_writes: what a pass writes back under the row locks of the jobs it decides about (allocations,
  starts, preemptions, standings, waiting reasons, events), set-based.
* recarving: after the pass, the re-carves of idle trays it proposes for the in-quota gangs left waiting
  (carving that follows demand), sent to integrations by task name.
* actions: what is done to one job: cancel, finish (its backend reported the end), stop in its backend,
  release its GPUs, tell its subscribers.

Dispatch to Slurm/Kubernetes and the sync of their state are in integrations.dispatch.
"""
