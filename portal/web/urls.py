from django.urls import path
from django.views.generic import RedirectView

from portal.web import tenant_views, views, whatif_views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="job-list", permanent=False)),
    path("jobs/", views.job_list_view, name="job-list"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("jobs/<int:job_id>/", views.job_detail_view, name="job-detail"),
    path("jobs/<int:job_id>/log/", views.job_log_view, name="job-log"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("nodes/", views.node_list_view, name="node-list"),
    path("tenants/", tenant_views.tenant_list_view, name="tenant-list"),
    path("whatif/", whatif_views.whatif_list_view, name="whatif"),
    path("whatif/<int:run_id>/", whatif_views.whatif_detail_view, name="whatif-detail"),
]
