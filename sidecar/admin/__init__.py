"""The admin port: health, readiness, metrics, status and the approvals API."""
