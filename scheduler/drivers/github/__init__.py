"""The GitHub driver: webhooks in (pull requests, pushes, comments, reviews)."""
