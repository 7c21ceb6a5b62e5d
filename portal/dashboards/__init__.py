"""Usage dashboards: job completion and queueing times, GPU-hours allocated and used, cluster utilization.

``stats`` holds the numbers as plain values (no Django), ``selectors`` and ``usage`` read them from the database,
``charts`` turns them into plotly figure dicts, ``views`` validates the page's parameters. Definitions:
docs/dashboards.md.
"""
