"""The DASH origin: our HTTP server, Caddy's configuration, the run's TLS certificates."""
