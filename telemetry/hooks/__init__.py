"""Hooks that feed the recorder: collectives, data loaders (and, later, devices)."""
