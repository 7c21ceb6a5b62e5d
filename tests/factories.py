"""factory_boy factories for the portal's models, shared by every database test."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from portal.nodes.models import Node
from portal.tenants.models import Membership, Quota, Role, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    gpu_limit = None


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.MEMBER


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"node-{n}")
