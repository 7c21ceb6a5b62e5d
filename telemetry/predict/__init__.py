"""Failure prediction: features over sliding windows, models, the alarm policy and walk-forward evaluation.

Pure functions over :class:`telemetry.table.TelemetryTable`; no Django, no clock. The control plane wraps
:func:`telemetry.predict.training.train_model` in a periodic task and stores the :class:`ModelArtifact` it returns;
``corral failures evaluate`` and ``bench/failure_predictor.py`` call :func:`telemetry.predict.evaluate.evaluate`.
"""
