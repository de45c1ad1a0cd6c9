"""Integrations' pages (see integrations/urls.py); the partition wizard's are integrations.plans.views
(its steps), whatif_views and progress_views."""
