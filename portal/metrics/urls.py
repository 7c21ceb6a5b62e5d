from django.urls import path

from portal.metrics import views

urlpatterns = [path("metrics", views.metrics_view, name="metrics")]
