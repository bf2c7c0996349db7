"""hero serve: the status pages, the JSON API and the Prometheus metrics of a home."""
