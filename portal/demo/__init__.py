"""The demo: a seeded data center with departments, jobs and telemetry (`manage.py seed_demo`, the demo
beat)."""
