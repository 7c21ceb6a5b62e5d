"""An admin's choice of which GPUs take shares of a GPU under MPS (issue #17), and how many clients at most.

Changing it never disturbs what runs: a GPU marked shared while a whole-GPU job holds it takes shares once that job
has released it, and a GPU marked whole while shares run on it takes a whole-GPU job once the last share has left
(a GPU with any active allocation is never free, ``portal.nodes.selectors.gpu_holders``). A round follows after
commit, so waiting work sees the change at once.
"""

from __future__ import annotations

import logging

from django.db import transaction

from portal.errors import ValidationFailed
from portal.nodes.models import Gpu
from portal.rounds import request_round
from scheduling.core.sharing import MAX_CLIENTS_VOLTA

logger = logging.getLogger(__name__)


@transaction.atomic
def gpus_set_shared(*, gpu_ids: list[int], shared: bool, by: str, max_clients: int | None = None) -> int:
    """Mark these GPUs shared (taking shares only) or whole (taking whole-GPU jobs only); with ``max_clients``, also
    set how many shares each takes at most (1 to 48, MPS's limit on Volta and later). Returns how many changed."""
    fields: dict[str, object] = {"shared": shared}
    if max_clients is not None:
        if not 1 <= max_clients <= MAX_CLIENTS_VOLTA:
            raise ValidationFailed(f"max_clients must be 1 to {MAX_CLIENTS_VOLTA}", field="max_clients")
        fields["max_clients"] = max_clients
    changed = Gpu.objects.filter(pk__in=gpu_ids).update(**fields)
    if changed:
        logger.info("%s marked %d GPU(s) %s", by, changed, "shared" if shared else "whole")
        request_round()
    return changed
