"""OnlineStarter (telemetry/online/starter.py): detection starts on the first tick after the process group
appears, or is off with one warning."""

import logging

from telemetry.online import OnlineStarter


class FakeDetector:
    def __init__(self, store):
        self.store = store
        self.batches = []
        self.stopped = False

    def on_records(self, records):
        self.batches.append(list(records))

    def poll(self):
        return ["result"]

    def stats(self):
        return {"analyses": 1}

    def stop(self):
        self.stopped = True


def test_detection_starts_on_the_first_tick_after_the_group_appears():
    store = {"value": None}
    starter = OnlineStarter(FakeDetector, find_store=lambda: store["value"])
    starter.on_records([1])  # init ran before init_process_group: nothing yet, nothing lost
    assert starter.detector is None and starter.poll() == [] and starter.stats() == {"online_started": False}
    store["value"] = "the rendezvous store"
    starter.on_records([2, 3])
    assert starter.detector.store == "the rendezvous store"
    assert starter.detector.batches == [[2, 3]] and starter.poll() == ["result"]
    starter.stop()
    assert starter.detector.stopped


def test_detection_that_cannot_start_is_off_with_one_warning(caplog):
    def broken(store):
        raise RuntimeError("no analyzer")

    with caplog.at_level(logging.WARNING, logger="telemetry"):
        starter = OnlineStarter(broken, find_store=lambda: "store")
        for _ in range(5):
            starter.on_records([])
    assert starter.detector is None
    assert [r.getMessage() for r in caplog.records] == ["telemetry: online detection off (no analyzer)"]
