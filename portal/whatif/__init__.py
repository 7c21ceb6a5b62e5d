"""What-if runs: replay the cluster's own finished jobs under other policies, from the portal.

The CLI already does this in two steps (``corral history`` then ``corral simulate``); this app does the same work
in a Celery task so an admin can compare policies in the browser before switching ``CORRAL_POLICY``. It is an
adapter like ``portal.scheduler``: the replay itself is ``scheduling.sim``, unchanged.
"""
