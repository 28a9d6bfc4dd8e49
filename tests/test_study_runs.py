"""Tests of study/runs.py: more than one process on one study folder (two commands, --jobs, --run_index then
--report_only) gives the numbers of one process with every run trained once; the evaluation cache is keyed by
the checkpoint; study.json refuses another study; the study folder's faults are one line with the files kept.

One tiny study (2 cells x 2 seeds, 4 steps) trained in this process is the reference every other way of
running it is compared to.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import assert_one_line_error, cli, corpus, digests

import ablate
import files
from model import GPTConfig
from options import parse_options
from study import folder as study_folder
from study import records as run_records
from study import run as study_run
from study.config import PER_RUN, AblateConfig
from study.plan import run_plan
from study.stages import run_study
from text.dataset import prepare
from train import TrainConfig

REPO = Path(__file__).resolve().parents[1]
STUDY = dict(variants="learned,none", seeds=2, eval_multipliers=1, protocols="nonoverlapping", eval_batch_size=8,
             threads=1)
TRAIN = dict(max_iters=4, eval_interval=2, eval_iters=2, log_interval=1, batch_size=4, warmup_iters=1,
             lr_decay_iters=4, device="cpu", compile=False, progress=False)
MODEL = dict(n_layer=1, n_head=2, n_embd=16, block_size=16)
RUNS = [f"{cell}/seed{seed}" for seed in (1337, 1338) for cell in ("learned", "none")]  # the plan's order


def flags(study_dir: Path, data: Path, **overrides) -> list[str]:
    return [f"--{k}={v}" for k, v in {**STUDY, **TRAIN, **MODEL, "study_dir": study_dir, "dataset": data,
                                      **overrides}.items()]


def configs(study_dir: Path, data: Path) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    return parse_options([str(a) for a in flags(study_dir, data)], (AblateConfig, TrainConfig, GPTConfig),
                                "", "", skip=PER_RUN)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The data and a study trained by one process, the usual way: root/data, root/study."""
    root = tmp_path_factory.mktemp("study_runs")
    prepare(corpus(), root / "data", "char")
    run_study(*configs(root / "study", root / "data"))
    return root


def numbers(study_dir: Path) -> dict:
    """Every number a study measured, less timings: each run's record and evaluation, and the summary."""
    runs = {}
    for name in RUNS:
        done = json.loads((study_dir / name / "done.json").read_text())
        evaluation = json.loads((study_dir / name / "eval.json").read_text())
        runs[name] = {k: done[k] for k in ("variant", "seed", "iter_num", "evals", "train_losses", "parameters")}
        runs[name]["eval"] = evaluation["protocols"]
    summary = json.loads((study_dir / "results.json").read_text())["summary"]
    return {"runs": runs, "summary": [{k: row[k] for k in ("variant", "seeds", "loss")} for row in summary]}


def kept(folder: Path) -> dict[str, str]:
    """digests without the lock files, which every process that claims a run writes its id into."""
    return {name: digest for name, digest in digests(folder).items() if not name.endswith(".lock")}


def trained_runs(output: str, study_dir: Path) -> list[str]:
    """The runs a process says it trained (not reused), as RUNS names."""
    return sorted(Path(m).relative_to(study_dir).as_posix() for m in re.findall(r"^trained (\S+):", output, re.M))


def start(argv: list[str], env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "ablate.py", *map(str, argv)], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def assert_each_run_logged_once(study_dir: Path) -> None:
    """One training per run folder: its metrics.jsonl holds each step once (two trainings would interleave)."""
    for name in RUNS:
        lines = [json.loads(line) for line in (study_dir / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["iter"] for r in lines if "train_loss" in r] == [1, 2, 3, 4], name
        assert [r["iter"] for r in lines if "val_loss" in r] == [0, 2, 4], name


# ---------------------------------------------------------------------------------------------------- processes


@pytest.mark.slow
def test_two_processes_on_one_study_train_each_run_once(reference, tmp_path, script_env):
    """The first run is held (as by a third process) while both start: they share the others, both wait for
    it, one trains it once it is free and the other reuses it."""
    study_dir = tmp_path / "study"
    first = study_dir / RUNS[0]
    with ExitStack() as stack:
        first.parent.mkdir(parents=True)
        assert files.hold_lock(first.with_name(first.name + ".lock"), stack) is None
        processes = [start(flags(study_dir, reference / "data"), script_env) for _ in range(2)]
        deadline = time.monotonic() + 120
        while not all((study_dir / name / "eval.json").exists() for name in RUNS[1:]):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
            time.sleep(0.2)
        assert not first.exists()  # nobody trained the held run
    outputs = [p.communicate(timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    trained = sorted(name for out, _ in outputs for name in trained_runs(out, study_dir))
    assert trained == sorted(RUNS)  # every run by one process, once
    assert_each_run_logged_once(study_dir)
    assert numbers(study_dir) == numbers(reference / "study")


@pytest.mark.slow
def test_two_different_studies_started_at_once_on_one_folder(reference, tmp_path, script_env):
    """The case that once mixed a 3000-step record with a 30-step evaluation: one study takes the folder, the
    other is refused with one line before it trains anything."""
    study_dir = tmp_path / "study"
    budgets = {4: flags(study_dir, reference / "data"), 6: flags(study_dir, reference / "data", max_iters=6,
                                                                 lr_decay_iters=6)}
    processes = {steps: start(argv, script_env) for steps, argv in budgets.items()}
    outputs = {steps: p.communicate(timeout=300) for steps, p in processes.items()}
    codes = {steps: p.returncode for steps, p in processes.items()}
    assert sorted(codes.values()) == [0, 2], outputs
    winner, loser = (4, 6) if codes[4] == 0 else (6, 4)
    assert_one_line_error(2, *outputs[loser], "study.json is another study", "max_iters", "--overwrite=True")
    assert trained_runs(outputs[winner][0], study_dir) == sorted(RUNS) and not trained_runs(outputs[loser][0],
                                                                                              study_dir)
    for name in RUNS:
        done = json.loads((study_dir / name / "done.json").read_text())
        evaluation = json.loads((study_dir / name / "eval.json").read_text())
        assert done["iter_num"] == winner and done["checkpoint"] == evaluation["key"]["checkpoint_identity"]
    if winner == 4:
        assert numbers(study_dir) == numbers(reference / "study")


def test_study_json_is_read_and_written_under_the_study_lock(reference, tmp_path):
    """Two studies started at the same instant: the second reads study.json only after the first wrote it."""
    ablate_config, train_config, model_config = configs(tmp_path / "study", reference / "data")
    identity = study_folder.study_identity(ablate_config, train_config, model_config)
    refused = []

    def claim() -> None:
        try:
            study_folder.claim_study(ablate_config, identity, ["learned", "none"])
        except study_run.UserError as e:
            refused.append(str(e))

    with ExitStack() as stack:
        (tmp_path / "study").mkdir()
        files.hold_lock(tmp_path / "study" / "study.lock", stack)  # as the first study does while it checks
        second = threading.Thread(target=claim)
        second.start()
        second.join(timeout=1)
        assert second.is_alive() and not (tmp_path / "study" / "study.json").exists()  # waiting for the lock
        other = json.loads((reference / "study" / "study.json").read_text())
        other["ablate_config"]["seeds"] = 3
        (tmp_path / "study" / "study.json").write_text(json.dumps(other))  # what the first study writes
    second.join(timeout=30)
    assert len(refused) == 1 and "is another study: seeds differ" in refused[0]


@pytest.mark.slow
def test_jobs_give_the_numbers_of_one_process(reference, tmp_path, script_env):
    study_dir = tmp_path / "study"
    process = start(flags(study_dir, reference / "data", jobs=2, threads=0), script_env)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, (out, err)
    assert trained_runs(out, study_dir) == sorted(RUNS)
    assert_each_run_logged_once(study_dir)
    assert numbers(study_dir) == numbers(reference / "study")


def test_run_index_over_the_plan_then_report_only(reference, tmp_path, capsys):
    study_dir = tmp_path / "study"
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data", list_runs=True), capsys)
    assert code == 0 and out.strip().splitlines()[-1].startswith("4 runs: --run_index=0..3"), (out, err)
    assert not study_dir.exists()  # listing writes nothing
    for index in range(len(RUNS)):
        if index == 2:  # half the plan: the report names what is missing and writes nothing
            before = kept(study_dir)
            result = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
            assert_one_line_error(*result, "2 of 4 runs are unfinished", str(study_dir / RUNS[2]), "--run_index")
            assert kept(study_dir) == before
        code, out, err = cli(ablate.main, flags(study_dir, reference / "data", run_index=index), capsys)
        assert code == 0 and trained_runs(out, study_dir) == [RUNS[index]], (out, err)
        assert not (study_dir / "results.md").exists()
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
    assert code == 0 and "trained" not in out, (out, err)
    assert numbers(study_dir) == numbers(reference / "study")
    # A report redrawn over one that holds the study's wall time keeps it, and names its own seconds apart.
    first = json.loads((study_dir / "results.json").read_text())
    results = study_dir / "results.json"
    results.write_text(json.dumps({**first, "invocation_seconds": 1234.5}))
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
    again = json.loads(results.read_text())
    assert code == 0 and again["invocation_seconds"] == 1234.5 and 0 < again["report_seconds"] < 1234.5, (out, err)


@pytest.mark.parametrize("flag, fragments", [
    (dict(run_index=4), ["run_index=4", "last run, 3", "4 runs"]),
    (dict(jobs=5), ["jobs=5", "4 runs", "CPUs", "--jobs="]),
    (dict(jobs=2, run_index=1), ["choose one of --jobs, --run_index and --report_only"]),
])
def test_modes_out_of_bounds_are_one_line(reference, tmp_path, capsys, flag, fragments):
    result = cli(ablate.main, flags(tmp_path / "study", reference / "data", **flag), capsys)
    assert_one_line_error(*result, *fragments)
    assert not (tmp_path / "study").exists()  # refused before anything is written


def test_a_held_run_is_never_deleted_nor_trained_twice(reference, tmp_path, capsys):
    shutil.copytree(reference / "study", tmp_path / "study")
    study_dir = tmp_path / "study"
    (study_dir / RUNS[1] / "done.json").unlink()  # unfinished, and held by a live process: not to be touched
    before = kept(study_dir)
    with ExitStack() as stack:
        held = study_dir / RUNS[1]
        files.hold_lock(held.with_name(held.name + ".lock"), stack)
        result = cli(ablate.main, flags(study_dir, reference / "data", run_index=1), capsys)
        assert_one_line_error(*result, "run 1", "is being trained by process", str(os.getpid()))
        assert kept(study_dir) == before
    # Its process gone (the lock free), the unfinished run is trained again from scratch by the next start.
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data"), capsys)
    assert code == 0 and trained_runs(out, study_dir) == [RUNS[1]], (out, err)
    assert_each_run_logged_once(study_dir)
    assert numbers(study_dir) == numbers(reference / "study")


# ---------------------------------------------------------------------------------------------------- caches


def test_the_eval_cache_refuses_an_evaluation_of_another_checkpoint(reference, tmp_path):
    shutil.copytree(reference / "study", tmp_path / "study")
    ablate_config, train_config, model_config = configs(tmp_path / "study", reference / "data")
    plan = {f"{r.dir.parent.name}/{r.dir.name}": r for r in run_plan(ablate_config, train_config, model_config)}
    learned, other = plan[RUNS[0]], plan[RUNS[2]]  # learned, seeds 1337 and 1338
    shutil.copy(other.dir / "ckpt.pt", learned.dir / "ckpt.pt")  # eval.json is still seed 1337's
    record = json.loads((learned.dir / "done.json").read_text())
    evaluated = study_run.evaluate_run(learned, ablate_config, record)
    own = json.loads((reference / "study" / RUNS[0] / "eval.json").read_text())
    of_other = json.loads((reference / "study" / RUNS[2] / "eval.json").read_text())
    assert evaluated["protocols"] == of_other["protocols"] != own["protocols"]  # computed again, for this file
    assert evaluated["key"]["checkpoint_identity"] == run_records.checkpoint_identity(other.dir / "ckpt.pt")
    # The run's own record names its checkpoint too: reusing the run is refused, nothing rewritten.
    with pytest.raises(study_run.UserError, match=r"ckpt.pt is not the checkpoint .*done.json"):
        study_run.finished_record(learned, overwrite=False)
    # And a split of other data (another description) is another key.
    changed = dict(json.loads((reference / "data" / "tokenizer.json").read_text()), val_tokens=1)
    assert study_run.eval_key(learned, ablate_config, record)["data"] != changed


def test_another_study_in_the_folder_is_refused_without_overwrite(reference, tmp_path, capsys):
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    before = kept(study_dir)
    result = cli(ablate.main, flags(study_dir, reference / "data", variants="none", seeds=1), capsys)
    assert_one_line_error(*result, "study.json is another study", "seeds", "variants", "cells only there: learned.",
                          "--overwrite=True to replace its results (its finished runs are reused)")
    assert kept(study_dir) == before
    # Another max_iters: every finished run of the new plan has other settings, and the message says so.
    result = cli(ablate.main, flags(study_dir, reference / "data", max_iters=5, lr_decay_iters=5), capsys)
    assert_one_line_error(*result, "max_iters", "4 of its finished runs have other settings and would be trained "
                          "again in their folders, replacing them")
    assert kept(study_dir) == before
    (study_dir / "old_plot.png").write_bytes(b"\x89PNG old")  # a plot only the old study had
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data", variants="none", seeds=1, overwrite=True),
                         capsys)
    assert code == 0 and "trained" not in out, err  # none/seed1337 is the same run: reused
    assert json.loads((study_dir / "results.json").read_text())["summary"][0]["variant"] == "none"
    plots = {p.name for p in study_dir.glob("*.png")}
    assert plots and plots == set(re.findall(r"\]\((\w+\.png)\)", (study_dir / "results.md").read_text()))
    assert all(kept(study_dir)[name] == digest for name, digest in before.items() if name.startswith("none/seed1337"))


# ---------------------------------------------------------------------------------------------------- faults


@pytest.mark.parametrize("how", ["empty", "truncated", "a list"])
def test_a_damaged_done_json_is_one_line_and_kept(reference, tmp_path, capsys, how):
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    done = study_dir / RUNS[3] / "done.json"
    done.write_bytes({"empty": b"", "truncated": done.read_bytes()[:100], "a list": b"[1, 2]"}[how])
    before = kept(study_dir)
    result = cli(ablate.main, flags(study_dir, reference / "data"), capsys)
    assert_one_line_error(*result, str(done), "is damaged", f"delete {study_dir / RUNS[3]} to train it again")
    assert kept(study_dir) == before


def test_a_damaged_eval_json_is_evaluated_again(reference, tmp_path, capsys):
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    evaluation = study_dir / RUNS[3] / "eval.json"
    evaluation.write_bytes(evaluation.read_bytes()[:50])
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data"), capsys)
    assert code == 0 and "trained" not in out, err
    [line] = err.strip().splitlines()  # one note, then the study as before
    assert line.startswith(f"{evaluation} is damaged (JSONDecodeError") and "evaluating the checkpoint again" in line
    assert numbers(study_dir) == numbers(reference / "study")


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_study_folder_that_cannot_be_a_folder_is_one_line(reference, tmp_path, capsys, where):
    (tmp_path / "taken").write_text("a user's file")
    study_dir = tmp_path / "taken" if where == "a file" else tmp_path / "taken" / "study"
    result = cli(ablate.main, flags(study_dir, reference / "data"), capsys)
    assert_one_line_error(*result, str(study_dir) if where == "a file" else "cannot create", "--study_dir")
    assert (tmp_path / "taken").read_text() == "a user's file"


@pytest.mark.slow
def test_a_read_only_study_folder_is_one_line(reference, tmp_path, script_env):
    """As root (who writes anywhere), the process runs without the capability to override permissions."""
    shutil.copytree(reference / "study", tmp_path / "study")
    (tmp_path / "study" / RUNS[3] / "eval.json").unlink()  # to be written again: refused
    folders = [tmp_path / "study", *(p for p in (tmp_path / "study").rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(0o555)
    before = kept(tmp_path / "study")
    unprivileged = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"] if os.geteuid() == 0 else []
    if unprivileged and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: permissions do not apply")
    try:
        process = subprocess.run([*unprivileged, sys.executable, "ablate.py",
                                  *map(str, flags(tmp_path / "study", reference / "data"))],
                                 cwd=REPO, env=script_env, capture_output=True, text=True, timeout=120)
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert_one_line_error(process.returncode, process.stdout, process.stderr, "cannot write", str(tmp_path / "study"))
    assert kept(tmp_path / "study") == before


def process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, parent id) of a process from /proc; None once it is gone."""
    try:
        state, parent = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[:2]
    except (FileNotFoundError, ProcessLookupError):
        return None
    return state, int(parent)


def children_of(pid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and (process_state(int(p.name)) or
                                                                                  ("", 0))[1] == pid]


def running(pid: int) -> bool:
    """Not ended: an ended child whose parent is gone can stay a zombie (Z) until init collects it."""
    state = process_state(pid)
    return state is not None and state[0] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill-9"])
def test_a_signal_stops_every_job_within_seconds_and_keeps_finished_runs(reference, tmp_path, script_env, stop):
    """SIGTERM: the study stops its jobs and exits 143. kill -9: the study cannot, so each job stops itself once
    it sees its parent gone (they went on training, re-parented to PID 1, until every run was done)."""
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    before = kept(study_dir)
    long_cell = "learned max_iters=1000000 lr_decay_iters=1000000 from_cell=learned"  # a finetune of its own length
    process = start(flags(study_dir, reference / "data", variants=f"learned,none,{long_cell}", jobs=2, threads=1,
                          overwrite=True), script_env)
    metrics = study_dir / "learned_max_iters=1000000_lr_decay_iters=1000000_from_cell=learned" / "seed1337" / \
        "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.stat().st_size > 0):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.2)
    jobs = children_of(process.pid)
    assert jobs
    signalled = time.monotonic()
    process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    assert process.returncode == (143 if stop == signal.SIGTERM else -9), (out, err)
    assert time.monotonic() - signalled < 20
    assert "Traceback" not in out + err
    while [pid for pid in jobs if running(pid)] and time.monotonic() < signalled + 20:
        time.sleep(0.1)  # multiprocessing's helper ends when it sees its parent gone
    assert not [pid for pid in jobs if running(pid)]  # the jobs ended too
    after = kept(study_dir)
    assert all(after[name] == digest for name, digest in before.items() if name.startswith(("learned/", "none/")))
    assert not (metrics.parent / "done.json").exists()


def test_a_trained_runs_line_reaches_stdout_in_one_write(tmp_path, monkeypatch):
    """--jobs workers share one pipe and Python runs unbuffered here: a line written in two pieces (tqdm writes
    the text, then its newline) let another worker's line in between, which the jobs test saw once in CI."""
    writes = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    record = {"iter_num": 7, "final_val_estimate": 1.5}
    monkeypatch.setattr(study_run, "finished_record", lambda run, overwrite: None)
    monkeypatch.setattr(study_run, "train_run", lambda run, plan, bar, start: dict(record))
    monkeypatch.setattr(sys, "stdout", Recorder())
    run = SimpleNamespace(dir=tmp_path / "learned" / "seed1337", role=study_run.STABLE)
    study_run.finish_run(run, [run], AblateConfig(), study_run.tqdm(disable=True), 0)
    lines = [w for w in writes if w]
    assert lines == [f"trained {run.dir}: 7 steps, final val estimate 1.5000\n"]


# ---------------------------------------------------------------------------------------------------- issue 45


@pytest.mark.parametrize("level", ["seed", "cell"])
def test_a_run_linked_to_another_studys_is_refused_and_that_run_kept(reference, tmp_path, capsys, level):
    """Was: <cell>/seed1337 a link to another study's run of the same settings was reused, and
    --keep_checkpoints=False then deleted that study's ckpt.pt and best.pt through the link."""
    other, mine = tmp_path / "other", tmp_path / "mine"
    shutil.copytree(reference / "study", other)
    link = mine / "learned" / "seed1337" if level == "seed" else mine / "learned"
    link.parent.mkdir(parents=True)
    link.symlink_to(other / link.relative_to(mine), target_is_directory=True)
    before = kept(other)
    for mode in (dict(keep_checkpoints=False), dict(report_only=True)):
        result = cli(ablate.main, flags(mine, reference / "data", **mode), capsys)
        assert_one_line_error(*result, f"{link} is a link to {other / link.relative_to(mine)}", "cp -r")
        assert kept(other) == before
        assert os.listdir(mine) == ["learned"] and (level == "cell" or os.listdir(mine / "learned") == ["seed1337"])


@pytest.mark.parametrize("what", ["a plot", "results.md"])
def test_a_full_disk_while_writing_the_report_is_one_line_and_keeps_the_records(reference, tmp_path, capsys,
                                                                                 monkeypatch, what):
    """Was: a plot written in place by savefig, its OSError a traceback that left half a PNG."""
    import errno

    import matplotlib.figure

    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    before = kept(study_dir)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if what == "a plot":
        def savefig(self, fname, *args, **kwargs):
            Path(fname).write_bytes(b"\x89PNG half a plot")
            raise full

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
        failed = study_dir / "training.png"
    else:
        write_text = Path.write_text

        def half_written(self, data, *args, **kwargs):
            if self.name.startswith("results.md"):
                write_text(self, data[:10])
                raise full
            return write_text(self, data, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", half_written)
        failed = study_dir / "results.md"
    result = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
    assert_one_line_error(*result, f"could not write {failed}: No space left on device", "--report_only=True")
    after = kept(study_dir)
    assert not [name for name in after if name.endswith(".tmp")]
    assert {k: v for k, v in after.items() if not k.endswith(".png")} == {
        k: v for k, v in before.items() if not k.endswith(".png")}  # records and results as they were
    assert after[failed.name] == before[failed.name]


@pytest.mark.parametrize("shape", ["alone", "beside another cell", "with budgets"])
def test_a_cell_of_another_length_is_refused_before_anything_trains(reference, tmp_path, capsys, shape):
    """Was: alone, it trained and the report ended in an IndexError; beside another cell, it was left out of the
    main table and the comparisons without a word; with --budgets, its max_iters did nothing."""
    variants = {"alone": "rope max_iters=6", "beside another cell": "learned,rope max_iters=6",
                "with budgets": "learned,rope max_iters=6"}[shape]
    extra = {"budgets": "4,8"} if shape == "with budgets" else {}
    result = cli(ablate.main, flags(tmp_path / "study", reference / "data", variants=variants, **extra), capsys)
    budget = "--budgets=4,8" if extra else "max_iters=4"
    assert_one_line_error(*result, "cell 'rope max_iters=6' sets max_iters=6", budget, "drop max_iters from the cell")
    assert not (tmp_path / "study").exists()


def test_a_time_to_target_study_trains_each_recipe_its_own_steps(reference, tmp_path, capsys, monkeypatch):
    """A speedrun's recipes differ in steps: with --target_loss and no --budgets a cell's max_iters is its own,
    and the time-to-target columns follow from the records, here on a stubbed clock (seconds a step per run)."""
    from scipy import stats

    fast = "learned max_iters=2 lr_decay_iters=2"
    per_step = {("learned", 1337): 1.0, ("learned", 1338): 2.0, (fast, 1337): 0.3, (fast, 1338): 0.5}
    real = study_run.train_in

    def timed(run, folder, bar, start):
        result = real(run, folder, bar, start)
        return {**result, "train_seconds": result["iter_num"] * per_step[run.variant, run.seed]}

    monkeypatch.setattr(study_run, "train_in", timed)
    study_dir = tmp_path / "study"
    code, _, err = cli(ablate.main, flags(study_dir, reference / "data", variants=f"learned,{fast}", target_loss=3.5,
                                          reference="learned"), capsys)
    assert code == 0, err
    results = json.loads((study_dir / "results.json").read_text())
    rows = {row["variant"]: row for row in results["target"]}
    assert (rows["learned"]["steps"], rows[fast]["steps"]) == (4, 2)
    assert rows[fast]["seconds"] == {"median": 0.8, "min": 0.6, "max": 1.0}  # 2 steps of 0.3 s and of 0.5 s
    logs = np.log([2 * 0.3 / (4 * 1.0), 2 * 0.5 / (4 * 2.0)])
    half = stats.t.ppf(0.975, 1) * logs.std(ddof=1) / np.sqrt(2)
    ratio = rows[fast]["time_ratio"]
    assert (ratio["ratio"], ratio["low"], ratio["high"]) == pytest.approx(
        (np.exp(logs.mean()), np.exp(logs.mean() - half), np.exp(logs.mean() + half)), rel=1e-9)
    for cell, folder in (("learned", "learned"), (fast, "learned_max_iters=2_lr_decay_iters=2")):
        losses = np.array([json.loads((study_dir / folder / f"seed{s}" / "eval.json").read_text())["protocols"][
            "nonoverlapping"]["16"]["loss"] for s in (1337, 1338)])
        t = (losses.mean() - 3.5) / (losses.std(ddof=1) / np.sqrt(2))
        assert rows[cell]["p_at_most_target"] == pytest.approx(stats.t.cdf(t, 1), rel=1e-9)
        assert not rows[cell]["reaches"]  # 2 seeds are never a record
    text = (study_dir / "results.md").read_text()
    assert "the tables' budget each cell's own steps" in text and "## Budgets" not in text
    assert "![time_to_target](time_to_target.png)" in text and (study_dir / "time_to_target.png").stat().st_size
    assert [row["steps"] for row in results["summary"]] == [4, 2]


def test_a_recipe_of_its_own_steps_must_end_its_cosine_there(reference, tmp_path, capsys):
    result = cli(ablate.main, flags(tmp_path / "study", reference / "data", variants="learned,learned max_iters=2",
                                    target_loss=3.5), capsys)
    assert_one_line_error(*result, "cell 'learned max_iters=2' trains max_iters=2 steps, but its cosine reaches "
                          "min_lr at lr_decay_iters=4", "add lr_decay_iters=2 to the cell")
    assert not (tmp_path / "study").exists()


def test_a_train_config_is_a_studys_base_and_its_out_dir_is_ignored(reference, tmp_path, capsys, monkeypatch):
    """Was: ablate.py config/train_shakespeare_char_cpu.py refused for its out_dir ("unknown option")."""
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    base = tmp_path / "train_tiny.py"
    base.write_text(f'out_dir = "{tmp_path / "out-tiny"}"\nbatch_size = 4\n')
    before = {k: v for k, v in kept(study_dir).items() if k.endswith(("done.json", "eval.json", "study.json"))}
    code, out, err = cli(ablate.main, [base, *flags(study_dir, reference / "data")], capsys)
    assert code == 0 and "trained" not in out, err  # the same study: out_dir is no setting of it
    [note] = err.strip().splitlines()
    assert note.startswith(f"note: out_dir='{tmp_path / 'out-tiny'}' is ignored") and str(study_dir) in note
    assert not (tmp_path / "out-tiny").exists()
    assert {k: v for k, v in kept(study_dir).items() if k in before} == before
    # The repository's own train config reads as a study's base; an out_dir flag is refused in one line.
    monkeypatch.chdir(REPO)
    _, train_config, model_config = ablate.read_options(["config/train_shakespeare_char_cpu.py", "--variants=rope"])
    assert train_config.dataset == "shakespeare_char" and model_config.n_layer == 4
    result = cli(ablate.main, flags(tmp_path / "another", reference / "data", out_dir=tmp_path / "x"), capsys)
    assert_one_line_error(*result, "--out_dir", "--study_dir")
    assert not (tmp_path / "another").exists() and not (tmp_path / "x").exists()


def test_a_record_whose_steps_its_checkpoint_contradicts_is_refused(reference, tmp_path, capsys):
    """Was: an edited iter_num with its digest computed again was believed, though the run's checkpoint on disk
    was saved at another step."""
    study_dir = tmp_path / "study"
    shutil.copytree(reference / "study", study_dir)
    done = study_dir / RUNS[0] / "done.json"
    record = json.loads(done.read_text())
    record["iter_num"] = 99999
    done.write_text(run_records.sealed({k: v for k, v in record.items() if k != "digest"}))
    before = kept(study_dir)
    result = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
    assert_one_line_error(*result, str(done), "99999", "step 4", f"delete {study_dir / RUNS[0]}")
    assert kept(study_dir) == before


def test_run_index_prunes_checkpoints_when_asked(reference, tmp_path, capsys):
    """--keep_checkpoints=False with --run_index: the run's checkpoints go once it is evaluated (they were kept)."""
    study_dir = tmp_path / "study"
    code, out, err = cli(ablate.main, flags(study_dir, reference / "data", run_index=0, keep_checkpoints=False),
                         capsys)
    assert code == 0, err
    assert (study_dir / RUNS[0] / "eval.json").is_file() and not list((study_dir / RUNS[0]).glob("*.pt"))
