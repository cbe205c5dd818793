"""The GitLab driver: webhooks in (merge requests, pushes, notes)."""
