"""The demo's launcher (telemetry/demo/launcher.py): its progress line says what happens and never
prints nan."""


def test_demo_progress_says_what_happens_and_never_prints_nan(tmp_path):
    from telemetry.demo.launcher import _Watch

    w = _Watch(str(tmp_path), 4)
    assert w.status(200, 3.0).strip().startswith("starting 4 ranks: importing torch") and "nan" not in w.status(
        200, 3.0
    )
    w.done = {0: 12, 1: 14, 2: 13, 3: 12}
    w.durations = [0.04, 0.05]
    assert "step   12/200  (ranks at 12-14)  median step   45.0 ms" in w.status(200, 9.0)
    w.done = {r: 200 for r in range(4)}
    assert "all 200 steps done; the ranks are flushing telemetry and exiting" in w.status(200, 17.0)
