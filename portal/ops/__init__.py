"""Running the portal: health probes and metrics, the `rackplane` command line, gunicorn's configuration."""
