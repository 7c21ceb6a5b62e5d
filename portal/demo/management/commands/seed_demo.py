"""``manage.py seed_demo``: the demo data `make run` starts with. Idempotent; never run it in production."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from portal.nodes.models import Gpu, Node
from portal.nodes.services import node_for_token, node_token_issue
from portal.tenants.models import Membership, Quota, Role, Tenant

DEMO_TENANTS = [
    # slug, name, gpu_limit, guaranteed
    ("demo", "Demo lab", 6, 4),
    ("vision", "Vision group", 4, 2),
]
DEMO_USERS = [
    # username, password, tenant, role
    ("demo", "demo", "demo", Role.MEMBER),
    ("alice", "alice", "vision", Role.ADMIN),
]


#: The demo node whose GPUs are shared (the agent's --fake-gpus runs shares under simulated MPS).
SHARED_DEMO_NODE = "local-2"


class Command(BaseCommand):
    help = "Create demo tenants, users (admin/admin, demo/demo, alice/alice) and agent tokens for local nodes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", nargs="*", default=["local-1", "local-2"], help="node names to issue tokens for")
        parser.add_argument("--token-dir", default=None, help="where to write <node>.token (default var/agents)")

    @transaction.atomic
    def handle(self, *args: object, nodes: list[str], token_dir: str | None, **options: object) -> None:
        if settings.PRODUCTION:
            raise CommandError("seed_demo creates well-known passwords; it refuses to run with CORRAL_PRODUCTION=1")
        user_model = get_user_model()
        admin, created = user_model.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            admin.set_password("admin")
            admin.save()
        for slug, name, limit, guaranteed in DEMO_TENANTS:
            tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
            Quota.objects.get_or_create(tenant=tenant, defaults={"gpu_limit": limit, "guaranteed_gpus": guaranteed})
        for username, password, slug, role in DEMO_USERS:
            user, created = user_model.objects.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.save()
            Membership.objects.get_or_create(user=user, tenant=Tenant.objects.get(slug=slug), defaults={"role": role})
        Membership.objects.get_or_create(
            user=admin, tenant=Tenant.objects.get(slug="demo"), defaults={"role": Role.ADMIN}
        )
        directory = Path(token_dir) if token_dir else settings.DATA_DIR / "agents"
        directory.mkdir(parents=True, exist_ok=True)
        for node_name in nodes:
            path = directory / f"{node_name}.token"
            if path.exists() and node_for_token(path.read_text().strip()) is not None:
                continue  # keep the token a running agent already uses
            _, token = node_token_issue(name=node_name)
            path.write_text(token + "\n")
            path.chmod(0o600)
        # GPU shares (issue #17): the second demo node's GPUs take shares under (simulated) MPS, so `make run` can
        # run `corral submit --gpus 0.25`; the first keeps whole GPUs. Its GPUs register later, with the node's default.
        if SHARED_DEMO_NODE in nodes:
            Node.objects.filter(name=SHARED_DEMO_NODE).update(share_new_gpus=True)
            Gpu.objects.filter(node__name=SHARED_DEMO_NODE).update(shared=True)
        self.stdout.write(
            self.style.SUCCESS(
                "Demo ready: log in as demo/demo (member of 'demo'), alice/alice (admin of 'vision'), "
                "admin/admin (staff)."
            )
        )
