"""Checks that can fail: each entry breaks the code a test guards, and that test must fail.

Issue 21 listed checks that could not fail (a test returning early, a loop over nothing, a skip of a
file that exists, a skip that took other tests with it). Each was fixed; an entry here shows, once,
that the fixed check does fail when the code it guards is broken.

For each entry: the repository (its tracked files and the untracked ones git does not ignore, as
the working tree has them; or a commit, with --commit) is copied into a temporary directory, the
entry's edits are applied there, and only its tests are run, with this venv's python, in the copy
(cwd and PYTHONPATH: the copy's `telemetry` and `tests` are the ones imported). First the same
tests run on the unmodified copy: a test must pass before its failure means anything.

    PASS            the test passed on the copy as it is and failed under the mutation, as it should
    FAIL            the test still passed (or was skipped) under the mutation: the mutation survived
    BASELINE-FAILS  the test fails (or skips) even without the mutation: nothing is shown
    ERROR           an edit did not apply (its text is gone: update the entry) or pytest could not run

Exit status: 0 if every entry is PASS, else 1.

    .venv/bin/python scripts/mutations.py              every entry
    .venv/bin/python scripts/mutations.py -k compose   the entries whose name contains "compose"
    .venv/bin/python scripts/mutations.py --list       the table

To add an entry, append a Mutation to MUTATIONS: a name, the check it proves (the issue's words),
the pytest node ids to run, and the edits (Replace, Delete, Create) that break the guarded code.
Keep the edits small and the tests few: every entry copies the repository and runs pytest twice.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


# ---- edits -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replace:
    """Replace `old` by `new` in `path` (relative to the repository; a glob edits every file it matches
    that holds `old`). `old` must be found, once per file unless `count` says otherwise (0: every one)."""

    path: str
    old: str
    new: str
    count: int = 1

    def apply(self, tree: str) -> str:
        paths = sorted(glob.glob(os.path.join(tree, self.path), recursive=True))
        done = []
        for p in paths:
            with open(p, encoding="utf-8") as f:
                text = f.read()
            n = text.count(self.old)
            if n == 0 or (self.count and n != self.count):
                continue
            with open(p, "w", encoding="utf-8") as f:
                f.write(text.replace(self.old, self.new))
            done.append(os.path.relpath(p, tree))
        if not done:
            raise EditError(
                f"{self.path}: no file holds {self.old!r}" + (f" {self.count} time(s)" if self.count else "")
            )
        return f"edited {', '.join(done)}"


@dataclass(frozen=True)
class Delete:
    path: str

    def apply(self, tree: str) -> str:
        p = os.path.join(tree, self.path)
        if not os.path.isfile(p):
            raise EditError(f"{self.path}: no such file")
        os.remove(p)
        return f"deleted {self.path}"


@dataclass(frozen=True)
class Create:
    """A new file (it must not exist): a module that shadows an installed one, say."""

    path: str
    text: str

    def apply(self, tree: str) -> str:
        p = os.path.join(tree, self.path)
        if os.path.exists(p):
            raise EditError(f"{self.path}: exists already")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(self.text)
        return f"created {self.path}"


class EditError(Exception):
    pass


@dataclass(frozen=True)
class Mutation:
    name: str  # short, unique: what is broken
    proves: str  # the check that could not fail, as issue 21 put it
    tests: tuple[str, ...]  # pytest node ids, every one of which must fail under the mutation
    edits: tuple = field(default_factory=tuple)
    timeout_s: int = 600


# ---- the table ---------------------------------------------------------------------------------
MUTATIONS = [
    Mutation(
        name="docs-scrape-config-invalid",
        proves="tests/test_prometheus_readme.py returned early when README had no rules block (now "
        "tests/deploy/test_docs_prometheus.py reads every yaml block of README.md and docs/): the scrape part",
        tests=("tests/deploy/test_docs_prometheus.py::test_scrape_configuration_passes_promtool",),
        edits=(Replace("docs/**/*.md", "honor_labels: true", "honor_labels: sometimes", count=0),),
    ),
    Mutation(
        name="docs-rules-gone",
        proves="the same: the documentation's rules block is no longer one (the README had none, and the "
        "old test returned early)",
        tests=(
            "tests/deploy/test_docs_prometheus.py::test_the_docs_show_a_scrape_configuration_and_rules",
            "tests/deploy/test_docs_prometheus.py::test_rules_pass_promtool",
        ),
        edits=(Replace("docs/**/*.md", "\ngroups:\n", "\ngroupz:\n", count=0),),
    ),
    Mutation(
        name="config-none-is-not-the-default",
        proves="a parametrized bad-input case (None) returned at once (tests/faults/test_fault_bad_input.py, job=None)",
        tests=("tests/faults/test_fault_bad_input.py::test_invalid_job_names_are_refused_at_init_naming_job[None]",),
        edits=(
            Replace(
                "telemetry/config.py",
                "values.update({k: v for k, v in kwargs.items() if v is not None})",
                "values.update(dict(kwargs))  # mutation: None is taken as a value, not as the default",
            ),
        ),
    ),
    Mutation(
        name="collective-not-recorded",
        proves="tests/test_collectives.py asserted only inside a loop over steps that may be empty "
        "(now tests/integration/test_collectives_gloo.py): a synchronous collective goes unrecorded",
        tests=("tests/integration/test_collectives_gloo.py::test_time_blocked_is_inside_the_step_and_its_phase",),
        edits=(
            Replace(
                "telemetry/hooks/collectives.py",
                "rec.emit((ev.COLLECTIVE, t1, name, t0, nbytes, gsize, gname, t1 - t0, factor))",
                "pass  # mutation: a synchronous collective is not recorded",
            ),
        ),
    ),
    Mutation(
        name="store-writes-no-step",
        proves="the same: no step reaches the run store, so the old loops ran over nothing and passed",
        tests=(
            "tests/integration/test_collectives_gloo.py::test_time_blocked_is_inside_the_step_and_its_phase",
            "tests/integration/test_collectives_gloo.py::test_telemetry_adds_no_collective_of_its_own",
        ),
        edits=(
            Replace(
                "telemetry/store/writer.py",
                "    def write(self, records: Sequence[StepRecord]) -> None:\n",
                "    def write(self, records: Sequence[StepRecord]) -> None:\n"
                "        records = records[:0]  # mutation: no step record reaches the run store\n",
            ),
        ),
    ),
    Mutation(
        name="rule-file-missing",
        proves='tests/test_compose.py skipped "not written yet" files that exist (now tests/deploy/test_compose.py)',
        tests=(
            "tests/deploy/test_compose.py::test_promtool_check_config_as_written",
            "tests/deploy/test_compose.py::test_promtool_check_config_with_the_rules_by_absolute_path",
            "tests/deploy/test_compose.py::test_promtool_check_rules[alerts.rules.yml]",
        ),
        edits=(Delete("telemetry/dashboards/prometheus/alerts.rules.yml"),),
    ),
    Mutation(
        name="hf-optimizer-phase-lost-without-lightning",
        proves="tests/test_integrations.py: a missing Lightning also skipped the Hugging Face tests (now one "
        "file per integration, each with its own importorskip); Lightning made absent and the HF callback broken",
        tests=(
            "tests/unit/telemetry/integrations/test_huggingface.py::"
            "test_hf_records_every_optimizer_step_with_phases_tokens_and_the_trainers_logs",
        ),
        edits=(
            Create(
                "lightning/__init__.py",  # first on sys.path in the copy: Lightning as a missing package
                'raise ModuleNotFoundError("No module named \'lightning\' (a mutation)", name="lightning")\n',
            ),
            Replace(
                "telemetry/integrations/huggingface.py",
                "self.tracker.begin_phase(OPTIMIZER)",
                "pass  # mutation: the optimizer phase is not recorded",
            ),
        ),
    ),
    Mutation(
        name="cause-failure-silent",
        proves='detectors/causes.py turned any exception into "no causes", silently: now counted '
        "(summary.cause_failures) and said once",
        tests=(
            "tests/unit/telemetry/analysis/detectors/test_cause_failures.py::"
            "test_a_failing_cause_rule_is_counted_said_once_and_shown",
        ),
        edits=(
            Replace(
                "telemetry/analysis/detectors/causes.py",
                "            failed += 1\n",
                "            pass  # mutation: a failing cause rule is not counted\n",
            ),
        ),
    ),
    Mutation(
        name="export-error-traceback",
        proves="a plug-in export that raised ExportError crashed `telemetry export` with a traceback",
        tests=("tests/unit/telemetry/cli/test_export_errors.py::test_an_export_error_is_a_sentence_and_exit_2",),
        edits=(
            Replace(
                "telemetry/cli/export.py",
                "except (TableError, ExportError, OSError) as exc:",
                "except (TableError, OSError) as exc:  # mutation: ExportError escapes",
            ),
        ),
    ),
    Mutation(
        name="metric-renamed",
        proves="tests/test_rules.py called a metric exported when its name appeared anywhere in the exporter's "
        "source: now the rules and the Grafana panels are held to telemetry.metrics.names",
        tests=(
            "tests/deploy/test_rules.py::test_the_rules_only_read_metrics_the_exporter_writes",
            "tests/deploy/test_grafana.py::test_every_metric_a_panel_reads_is_exported_or_recorded",
        ),
        edits=(
            Replace(
                "telemetry/metrics/names.py",
                'STEPS = Metric("train_steps", "counter", "Completed steps")',
                'STEPS = Metric("train_steps_completed", "counter", "Completed steps")  # mutation: renamed',
            ),
        ),
    ),
    Mutation(
        name="sinks-share-one-thread",
        proves="one pipeline thread served every sink: a sink that blocked stopped the others (issue 22)",
        tests=(
            "tests/integration/test_blocking_sinks.py::"
            "test_a_store_blocked_in_the_kernel_stops_neither_metrics_nor_training_nor_shutdown",
        ),
        edits=(
            Replace(
                "telemetry/pipeline/workers.py",
                "                self._queue.append((_WRITE, taken))\n",
                "                self.sink.write(taken)  # mutation: the caller's thread writes, and waits\n"
                "                self._queue.append((_WRITE, taken[:0]))\n",
            ),
        ),
    ),
    Mutation(
        name="clean-up-interruptible",
        proves="a second signal during the launcher's clean-up interrupted it (issue 22)",
        tests=("tests/unit/telemetry/test_children.py::test_a_signal_during_the_clean_up_waits_until_it_is_done",),
        edits=(
            Replace(
                "telemetry/children.py",
                "    arrived: list[int] = []\n",
                "    yield  # mutation: nothing is held\n    return\n    arrived: list[int] = []\n",
            ),
        ),
    ),
    Mutation(
        name="spawned-ranks-guess-rank-0",
        proves="with no launcher variables every process was rank 0 of 1 (issue 31): mp.spawn's two ranks wrote as one",
        tests=("tests/integration/test_launches.py::test_the_tutorials_mp_spawn_gives_two_ranks_with_every_step",),
        edits=(
            Replace(
                "telemetry/api.py",
                '    group = group_rank(sys.modules.get("torch.distributed"))\n    if group is not None:',
                "    group = None  # mutation: the process group is not asked\n    if group is not None:",
            ),
            Replace(
                "telemetry/api.py",
                "        group = group_rank(dist)\n        if group is None:\n            return False",
                "        group = None  # mutation\n        if group is None:\n            return False",
            ),
        ),
    ),
]


# ---- running -----------------------------------------------------------------------------------
def copy_tree(dest: str, commit: str | None) -> None:
    """The repository as the working tree has it (tracked files and untracked ones git does not
    ignore), or as COMMIT has it."""
    if commit:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
        return
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for rel in sorted(set(out.decode().split("\0")) - {""}):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):  # deleted in the working tree, or a submodule
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))


def node_key(node: str) -> tuple[str, str]:
    """A node id as JUnit XML names it: (classname, name)."""
    path, _, name = node.partition("::")
    return path[: -len(".py")].replace("/", "."), name


def run_tests(tree: str, tests: tuple[str, ...], timeout_s: int) -> tuple[dict[str, str], str]:
    """{node id: passed | failed | skipped | absent} and the tail of pytest's output. A node without a
    parameter id stands for every test of that function."""
    report = os.path.join(tree, ".mutation-report.xml")
    if os.path.exists(report):
        os.remove(report)
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith("TELEMETRY_")}
    cmd = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--junitxml={report}", *tests]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
        tail = (proc.stdout + proc.stderr)[-2500:]
    except subprocess.TimeoutExpired as exc:
        return {t: "absent" for t in tests}, f"pytest ran past {timeout_s} s: {exc}"
    outcomes: dict[tuple[str, str], list[str]] = {}
    if os.path.exists(report):
        for case in ET.parse(report).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
            outcomes.setdefault((case.get("classname"), case.get("name")), []).append(outcome)
    result = {}
    for t in tests:
        cls, name = node_key(t)
        got = [
            o for (c, n), outs in outcomes.items() if c == cls and (n == name or n.startswith(name + "[")) for o in outs
        ]
        if not got:
            result[t] = "absent"
        else:  # every parametrization must fail for the node to count as failed
            result[t] = "failed" if all(o == "failed" for o in got) else "skipped" if "skipped" in got else "passed"
    return result, tail


def check_imports_from(tree: str) -> None:
    out = subprocess.run(
        [PYTHON, "-c", "import telemetry, tests; print(telemetry.__file__); print(tests.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": tree},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for path in out:
        if not os.path.realpath(path).startswith(os.path.realpath(tree) + os.sep):
            raise SystemExit(f"mutations.py: the copy imports {path}, not its own code: the results would mean nothing")


def run_entry(m: Mutation, commit: str | None, verbose: bool) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix=f"mutation-{m.name}-") as tree:
        copy_tree(tree, commit)
        check_imports_from(tree)
        base, tail = run_tests(tree, m.tests, m.timeout_s)
        if any(v != "passed" for v in base.values()):
            return "BASELINE-FAILS", f"without the mutation: {base}\n{tail}"
        try:
            said = [e.apply(tree) for e in m.edits]
        except EditError as exc:
            return "ERROR", f"the mutation does not apply: {exc}"
        got, tail = run_tests(tree, m.tests, m.timeout_s)
        detail = "; ".join(said) + f"\nunder the mutation: {got}" + (f"\n{tail}" if verbose else "")
        if any(v == "absent" for v in got.values()):
            return "ERROR", detail + f"\n{tail}"
        if all(v == "failed" for v in got.values()):
            return "PASS", detail
        return "FAIL", detail + f"\n{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", dest="pattern", default="", help="only the entries whose name contains this")
    ap.add_argument("--commit", help="copy this commit instead of the working tree")
    ap.add_argument("--list", action="store_true", help="print the table and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="pytest's output under each mutation too")
    args = ap.parse_args(argv)
    entries = [m for m in MUTATIONS if args.pattern in m.name]
    if args.list:
        for m in entries:
            print(f"{m.name}\n  proves: {m.proves}\n  tests:  {', '.join(m.tests)}")
        return 0
    if not entries:
        print(f"mutations.py: no entry matches {args.pattern!r}", file=sys.stderr)
        return 1
    failed = 0
    for m in entries:
        t0 = time.monotonic()
        status, detail = run_entry(m, args.commit, args.verbose)
        failed += status != "PASS"
        print(f"{status:<15} {m.name}  ({time.monotonic() - t0:.0f} s)")
        print(f"{'':<16}{m.proves}")
        for line in detail.splitlines():
            print(f"{'':<16}{line}")
        sys.stdout.flush()
    print(f"mutations.py: {len(entries) - failed} of {len(entries)} PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
