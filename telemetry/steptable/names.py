"""What a steps-table column's name says about its values, with nothing imported: the rank's store
(:mod:`telemetry.store.aggregates`) asks this while sealing, and a rank never needs pandas."""

from __future__ import annotations


def zero_when_absent(name: str) -> bool:
    """A phase's seconds (or its time blocked in collectives), a checkpoint's seconds and bytes: a step
    that did not run the phase or a checkpoint took no time in it, so a missing value is 0, not unknown.
    Not the input's readiness: a step that took no batch was neither ready nor waiting. (``start_s``
    and ``duration_s`` match the pattern and are never missing in a valid row.)"""
    return (name.endswith("_s") and ("." not in name or name.startswith("comm."))) or (
        name.startswith("io.") and name != "io.input_ready"
    )
