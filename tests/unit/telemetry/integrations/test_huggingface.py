"""The Hugging Face callback (telemetry/integrations/huggingface.py) on a real Trainer (a tiny GPT-2 on
the CPU): every optimizer step recorded under the Trainer's own step number, its phases, tokens and
logged values; an orphaned step, evaluation in between, and a broken telemetry never reach the
Trainer. The example under torchrun: tests/integration/test_examples.py."""

import pytest
import torch

import telemetry
from telemetry.analysis.inputs.load import open_input

transformers = pytest.importorskip("transformers")  # this file's own: without Lightning these tests still run
from telemetry.integrations.huggingface import TelemetryCallback as HFCallback  # noqa: E402 - after importorskip


def _table(run_dir):
    run = open_input(run_dir)
    assert run.warnings == []
    return run.table.set_index("step")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=64, length=16):
        self.ids = torch.randint(0, 100, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(cfg)


def _trainer(tmp_path, callback, model=None, **args):
    kw = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=6,
        logging_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    kw.update(args)
    return transformers.Trainer(
        model=model or _gpt2(),
        args=transformers.TrainingArguments(**kw),
        train_dataset=Tokens(),
        eval_dataset=Tokens(16),
        callbacks=[callback],
    )


def test_hf_records_every_optimizer_step_with_phases_tokens_and_the_trainers_logs(tmp_path):
    run_dir = str(tmp_path / "run")
    trainer = _trainer(tmp_path, HFCallback(run_dir=run_dir, sinks=["store"], announce=False))
    trainer.train()
    assert telemetry.session() is None  # the callback started telemetry, and stopped it at the end
    t = _table(run_dir)
    assert list(t.index) == [0, 1, 2, 3, 4, 5] and t["ok"].all()
    assert (t["tokens"] == 2 * 4 * 16).all() and (t["samples"] == 8).all()  # 2 micro-batches of 4 x 16
    for phase in ("forward_s", "backward_s", "optimizer_s"):
        assert (t[phase] > 0).all(), phase
    assert (t["forward_s"] + t["backward_s"] + t["optimizer_s"] <= t["duration_s"] * 1.001).all()
    # the Trainer logs after step 1 (global_step 2) and 3: recorded with the next step, the same values
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert t["log.loss"].dropna().round(4).tolist() == [round(v, 4) for v in losses[:2]]
    assert t["log.loss"].dropna().index.tolist() == [2, 4]


def test_hf_evaluation_between_steps_is_not_a_step_and_the_users_own_session_stands(tmp_path):
    run_dir = str(tmp_path / "run")
    telemetry.init(run_dir=run_dir, sinks=["store"], announce=False)
    trainer = _trainer(tmp_path, HFCallback(), eval_strategy="steps", eval_steps=2)
    trainer.train()
    s = telemetry.session()
    assert not s.closed  # the user started it: the user stops it
    telemetry.shutdown()
    assert s.stats()["unattributed_events"] == 0
    t = _table(run_dir)
    assert list(t.index) == [0, 1, 2, 3, 4, 5]
    assert (t["samples"] == 8).all()  # the evaluation's forwards counted nowhere


class Exploding(torch.nn.Module):
    """A GPT-2 whose forward raises on one call: an exception in the middle of a step."""

    def __init__(self, at_call):
        super().__init__()
        self.inner, self.calls, self.at = _gpt2(), 0, at_call

    def forward(self, input_ids=None, labels=None):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("boom in forward")
        return self.inner(input_ids=input_ids, labels=labels)


def test_hf_an_exception_mid_step_reaches_the_user_unchanged_and_the_orphaned_step_is_failed(tmp_path):
    run_dir = str(tmp_path / "run")
    cb = HFCallback(run_dir=run_dir, sinks=["store"], announce=False)
    model = Exploding(at_call=5)  # the first micro-batch of step 2
    with pytest.raises(RuntimeError, match="boom in forward"):
        _trainer(tmp_path, cb, model=model).train()
    # the user resumes with the same callback: the orphaned step is ended as failed, training goes on
    _trainer(tmp_path, cb, model=model, max_steps=3).train()  # a new Trainer: steps 0-2 again
    run = open_input(run_dir)
    ended = [(r["step"], r["ok"]) for r in run.records]
    assert ended == [(0, True), (1, True), (2, False), (0, True), (1, True), (2, True)]
    assert cb.tracker.errors.total == 0


def test_hf_a_broken_telemetry_never_raises_into_the_trainer(tmp_path, monkeypatch, caplog):
    run_dir = str(tmp_path / "run")
    cb = HFCallback(run_dir=run_dir, sinks=["store"], announce=False)

    def broken(*a, **k):
        raise OSError("telemetry is broken")

    monkeypatch.setattr(telemetry, "step", broken)
    trainer = _trainer(tmp_path, cb)
    trainer.train()
    assert trainer.state.global_step == 6
    assert cb.tracker.errors.counts == {"on_step_begin": 6}
    assert sum("on_step_begin failed" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_hf_bad_settings_are_an_error_when_the_callback_is_made():
    with pytest.raises(ValueError, match="flush_interval_s"):
        HFCallback(flush_interval_s=-1)


@pytest.mark.real_clock  # the save is placed from its files' modification times, which the kernel keeps in real time
def test_hf_a_trainer_save_is_marked_from_its_files_in_the_step_that_follows(tmp_path):
    run_dir = str(tmp_path / "run")
    trainer = _trainer(
        tmp_path, HFCallback(run_dir=run_dir, sinks=["store"], announce=False), save_strategy="steps", save_steps=3
    )
    trainer.train()
    t = _table(run_dir)
    folder = tmp_path / "out" / "checkpoint-3"  # saved after the third optimizer step (numbered 2)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert t.loc[3, "io.checkpoint_bytes"] == size > 0 and t.loc[3, "io.checkpoint_saves"] == 1
    others = t.drop(index=3)  # the save after the last step (checkpoint-6) has no step to count in
    assert (others["io.checkpoint_bytes"] == 0).all()
