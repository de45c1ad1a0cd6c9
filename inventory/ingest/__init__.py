"""Node reports into the inventory: reconciling a report (reports), the GPUs it lists and which it may move
(gpus), unchanged reports (heartbeats), and what an ingest answers (results)."""
