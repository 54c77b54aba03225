"""Transport only: routing to the configured upstreams, header hygiene, forwarding."""
