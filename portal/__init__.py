"""The Corral portal (Django project). Importing it loads the Celery app so ``shared_task`` binds to it."""

from portal.celery import app as celery_app

__all__ = ("celery_app",)
