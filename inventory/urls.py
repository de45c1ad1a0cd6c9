"""Inventory's own pages, included by portal/urls.py in the `inventory` namespace (/inventory/)."""

from django.urls import path

from inventory import views

urlpatterns = [
    path("agent-tokens/", views.agent_token_list, name="agent-token-list"),
    path("agent-tokens/<int:pk>/issued/", views.agent_token_issued, name="agent-token-issued"),
    path("agent-tokens/<int:pk>/revoke/", views.agent_token_revoke, name="agent-token-revoke"),
]
