from django.urls import path

from portal.accounts import views

urlpatterns = [
    path("accounts/login/", views.CorralLoginView.as_view(), name="login"),
    path("accounts/oidc/start/", views.OidcStartView.as_view(), name="oidc-start"),
    path("accounts/oidc/callback/", views.OidcCallbackView.as_view(), name="oidc-callback"),
]
