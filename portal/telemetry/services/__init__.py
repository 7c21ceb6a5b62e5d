"""Services that write telemetry, one module per concern (nothing is re-exported here: import from the module).

- ``ingest``: ``telemetry_ingest`` stores one agent batch (raw samples, the latest row per GPU, XIDs, the node's
  counters) and hands the GPUs the health rules condemn to the health actions.
- ``health``: the health actions (drain a GPU and requeue its jobs, reopen jobs a late fatal XID killed,
  soft-cordon, mark healthy again), the alerts they raise and the mail to admins. Its docstring states the lock
  order.
- ``rollups``: the 1-minute and 1-hour rollups, and retention (pruning raw samples and old rollups).
- ``history``: the hourly history as the telemetry CSV schema's rows, the drains as failure labels, and their export.
- ``predictor``: the failure predictor's training and scoring (which soft-cordons through ``health``).

The rules themselves are pure and live elsewhere (``telemetry.health`` judges a GPU, ``telemetry.retry`` says who
killed a job, ``telemetry.predict`` builds features and labels, ``telemetry.fields`` says what each reading is);
these modules feed them rows and apply what they decide.
"""
