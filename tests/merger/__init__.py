"""Tests of the merger's git engine against real git repositories."""
