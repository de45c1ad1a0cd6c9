"""The web shell every page goes through: middleware and context processors (the static assets served from
packages are core.static_assets)."""
