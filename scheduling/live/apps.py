from django.apps import AppConfig


class LiveSchedulingConfig(AppConfig):
    name = "scheduling.live"
    label = "scheduling"
    verbose_name = "Scheduling loop"
