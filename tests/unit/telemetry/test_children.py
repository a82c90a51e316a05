"""telemetry/children.py in one process: clean-up runs with SIGINT, SIGTERM and SIGHUP held (one that
arrives meanwhile is delivered after it, never inside it); SIGTERM and SIGHUP interrupt as Ctrl-C does."""

import os
import signal

import pytest

from telemetry import children


def test_a_signal_during_the_clean_up_waits_until_it_is_done():
    previous = children.interrupt_on_signals()
    done = []
    try:
        with pytest.raises(children.Interrupted, match="SIGTERM"):
            with children.signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)  # a second one too
                for i in range(100_000):  # bytecodes, at which an unheld handler would have run
                    done.append(i)
        assert len(done) == 100_000  # the block ran to its end; the interrupt came after it
    finally:
        children.restore(previous)
    assert signal.getsignal(signal.SIGTERM) is previous[signal.SIGTERM]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_interrupt_as_ctrl_c_does(sig):
    # at its default, as a command typed at a terminal starts: the suite itself may run under nohup
    # (SIGHUP ignored), and an ignored signal stays ignored (the next test)
    before = signal.signal(sig, signal.SIG_DFL)
    previous = children.interrupt_on_signals()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
            for _ in range(100_000):
                pass
    finally:
        children.restore(previous)
        signal.signal(sig, before)


def test_a_signal_ignored_at_start_stays_ignored():
    # nohup's SIGHUP: closing the terminal must not stop the job
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = children.interrupt_on_signals()
        try:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.SIGHUP not in previous and signal.SIGTERM in previous
        finally:
            children.restore(previous)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_process_the_package_did_not_start_sets_nothing(monkeypatch):
    monkeypatch.delenv(children.PARENT_ENV, raising=False)
    assert children.die_with_parent() is False


def test_the_parent_variable_names_this_process():
    assert children.child_env({"A": "1"}) == {"A": "1", children.PARENT_ENV: str(os.getpid())}
