"""What a run was (telemetry/provenance.py, the run's meta): the training code's commit, dirty or not,
its tags, and the versions; a folder without git says why, never a guess."""

import json
import os
import subprocess

import pytest

import telemetry
from telemetry.config import Config, ConfigError
from telemetry.provenance import code_state


def _repo(path):
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "train.py").write_text("print(1)\n")
    subprocess.run(["git", "-C", str(path), "add", "train.py"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "one"], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_the_commit_and_a_dirty_tree_are_read_from_the_code_s_repository(tmp_path):
    head = _repo(tmp_path)
    assert code_state(str(tmp_path), environ={}) == {"commit": head, "dirty": False, "repo": str(tmp_path)}
    (tmp_path / "train.py").write_text("print(2)\n")
    assert code_state(str(tmp_path), environ={})["dirty"] is True


def test_no_repository_says_why_and_a_given_commit_wins(tmp_path):
    state = code_state(str(tmp_path), environ={})
    assert state["commit"] is None and "not in a git repository" in state["why"]
    given = code_state(str(tmp_path), environ={"TELEMETRY_GIT_COMMIT": "abc123", "TELEMETRY_GIT_DIRTY": "1"})
    assert given == {"commit": "abc123", "dirty": True, "repo": None}


def test_the_run_meta_holds_the_commit_tags_and_versions(run_dir, monkeypatch):
    monkeypatch.setenv("TELEMETRY_GIT_COMMIT", "feedbeef")
    telemetry.init(run_dir=run_dir, job="meta", sinks=["store"], tags={"model": "7b", "exp": "lr-sweep"})
    with telemetry.step():
        pass
    telemetry.shutdown()
    with open(os.path.join(run_dir, "meta.json")) as f:
        meta = json.load(f)
    assert meta["code"]["commit"] == "feedbeef" and meta["tags"] == {"exp": "lr-sweep", "model": "7b"}
    assert meta["versions"]["telemetry"] == telemetry.__version__ and meta["world_size"] == 1


@pytest.mark.parametrize(
    "tags,want",
    [({"b": "2", "a": 1}, ("a=1", "b=2")), ("model=7b, exp=x", ("exp=x", "model=7b")), (["k=v=w"], ("k=v=w",))],
)
def test_tags_from_a_dict_a_string_or_a_list(tags, want):
    assert Config.resolve({"tags": tags}, environ={}).tags == want


@pytest.mark.parametrize("tags", [{"1x": "a"}, ["novalue"], 5, {"k": ["list"]}])
def test_bad_tags_name_the_setting_and_what_is_accepted(tags):
    with pytest.raises(ConfigError, match="tags.*accepted"):
        Config.resolve({"tags": tags}, environ={})
