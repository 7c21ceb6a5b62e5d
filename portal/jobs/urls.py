from django.urls import path

from portal.jobs import views

urlpatterns = [
    path("jobs/", views.job_list_view, name="job-list"),
    path("jobs/new/", views.job_submit_view, name="job-submit"),
    path("jobs/<int:job_id>/", views.job_detail_view, name="job-detail"),
    path("jobs/<int:job_id>/log/", views.job_log_view, name="job-log"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("arrays/<int:array_id>/", views.array_detail_view, name="array-detail"),
    path("arrays/<int:array_id>/tasks/", views.array_tasks_view, name="array-tasks"),
    path("arrays/<int:array_id>/cancel/", views.array_cancel_view, name="array-cancel"),
]
