"""HTTP: webhooks in, REST API and status page out."""
