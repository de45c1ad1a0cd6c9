"""Inventory's pages (see inventory/urls.py)."""
