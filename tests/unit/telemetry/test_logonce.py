"""Log once, count the rest (telemetry/logonce.py): the one helper every repeated failure goes through."""

import logging

from telemetry.logonce import LogOnce


def test_first_of_each_key_is_logged_and_every_one_counted(caplog):
    once = LogOnce()
    with caplog.at_level(logging.WARNING, logger="telemetry"):
        for _ in range(1000):
            once("export", "telemetry: export failed: %s", "timeout")
        once("queue", "telemetry: queue full")
    assert [r.getMessage() for r in caplog.records] == ["telemetry: export failed: timeout", "telemetry: queue full"]
    assert once.counts == {"export": 1000, "queue": 1} and once.total == 1001


def test_count_alone_logs_nothing(caplog):
    once = LogOnce()
    with caplog.at_level(logging.DEBUG, logger="telemetry"):
        assert once.count("x") is True
        assert once.count("x") is False
    assert caplog.records == [] and once.counts == {"x": 2}
