"""Integrations' pages (see integrations/urls.py); the partition wizard's are integrations.plans.views."""
