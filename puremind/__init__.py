"""pureMind: one local memory for coding agents, kept in plain Markdown you own."""

import os as _os

__version__ = "0.2.0"

# onnxruntime 1.29+ ships telemetry on Linux and macOS that a long-lived process sends every few seconds; its one
# working opt-out is this variable, read when onnxruntime initialises, so it is set here: every pureMind process
# (CLI, server, watcher, export, benches, tests) imports this package before onnxruntime. A value the user set is
# left alone ("0" turns the telemetry on); an empty one counts as unset. Hugging Face telemetry is switched off
# next to its import, in puremind.models.hub.ensure_telemetry_off.
if not _os.environ.get("ORT_DISABLE_TELEMETRY"):
    _os.environ["ORT_DISABLE_TELEMETRY"] = "1"
