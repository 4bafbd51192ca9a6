"""pureMind: one local memory for coding agents, kept in plain Markdown you own."""

__version__ = "0.2.0"
