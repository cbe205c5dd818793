"""Tests of docker/: its structure here, smoke tests where Docker exists."""
