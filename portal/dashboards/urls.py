from django.urls import path

from portal.dashboards import views

urlpatterns = [
    path("dashboard/", views.dashboard_view, name="dashboard"),
]
