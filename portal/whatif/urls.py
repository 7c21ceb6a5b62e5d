from django.urls import path

from portal.whatif import views

urlpatterns = [
    path("whatif/", views.whatif_list_view, name="whatif"),
    path("whatif/<int:run_id>/", views.whatif_detail_view, name="whatif-detail"),
]
