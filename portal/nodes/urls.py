from django.urls import path

from portal.nodes import views

urlpatterns = [
    path("nodes/", views.node_list_view, name="node-list"),
    path("nodes/<slug:name>/", views.node_detail_view, name="node-detail"),
    path("nodes/<slug:name>/release-fenced/", views.node_release_fenced_view, name="node-release-fenced"),
]
