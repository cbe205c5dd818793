"""Tests of the executor's job runner (real git, real processes; no services)."""
