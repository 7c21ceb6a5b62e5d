from django.urls import path

from portal.pools import views

urlpatterns = [
    path("pools/reclaims/", views.reclaim_panel_view, name="pool-reclaims"),
]
