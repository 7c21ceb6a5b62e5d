from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    """The live scheduling loop: the adapter that feeds ``scheduling.core.decide`` from the database and applies
    what it decides through the jobs services."""

    name = "portal.scheduler"
    label = "scheduler"
    verbose_name = "Scheduling loop"
