"""A sink as another package would ship it (used by test_plugins through an entry point)."""

from telemetry.pipeline.sinks import Sink


class PrinterSink(Sink):
    name = "printer"
    seen: list[int] = []

    def __init__(self, config, ctx, run_info):
        pass

    def write(self, records):
        PrinterSink.seen.extend(r.step for r in records)
