"""The site's own pages, which belong to no one app: home and error pages, search, account, audit log,
notification settings and inbox."""
