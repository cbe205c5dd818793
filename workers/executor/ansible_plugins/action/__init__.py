"""Action plugins: :mod:`.zuul_return` merges a task's data into the build's result data."""
