"""Scheduling's pages (see scheduling/urls.py)."""
