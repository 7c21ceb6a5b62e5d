from django.urls import path

from portal.tenants import views

urlpatterns = [path("tenants/", views.tenant_list_view, name="tenant-list")]
