"""Energy saving by forecast (issue #19): power idle nodes down and wake them ahead of demand.

Pure ground floor: no Django, no clock. ``series`` reads a ``time,active,total`` file into 10-minute steps;
``forecast`` trains the demand forecaster (gradient boosting); ``policies`` holds Corral's policy and the two
baselines (Slurm-style idle timeout, Helios CES); ``replay`` plays a policy over a series and measures it;
``compare`` runs the comparison ``corral energy replay`` prints. See docs/energy.md.
"""
