"""A study's records are its result: a study stopped by its time box and continued from its records alone (no
checkpoint, as a repository holds it) in another folder, or gathered from two array tasks' folders, reports what
one uninterrupted study reports; pruning keeps every checkpoint a branch still needs; an edited or incomplete
record is refused in one line; every record names the one dtype the study trains in.

The tiny study has wsd budgets (a constant-rate run per cell and seed, a branch per budget), so that records
without checkpoints meet branches whose start must be trained again.
"""

import fnmatch
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error, cli, corpus

import ablate
from model import GPTConfig
from options import parse_options
from study import cost as study_cost
from study import folder as study_folder
from study import jobs as study_jobs
from study import records as run_records
from study import run as study_run
from study.cells import cell_name, study_cells
from study.config import PER_RUN, AblateConfig, parse_time_limit
from study.plan import run_plan
from study.stages import run_study
from text.dataset import prepare
from train import TrainConfig

STUDY = dict(variants="learned,none", seeds=2, budgets="4,8", eval_multipliers=1, protocols="nonoverlapping",
             eval_batch_size=8, threads=1)
TRAIN = dict(max_iters=8, lr_schedule="wsd", wsd_decay_fraction=0.25, eval_interval=2, eval_iters=2,
             log_interval=1, batch_size=4, warmup_iters=1, lr_decay_iters=8, device="cpu", compile=False,
             progress=False)
MODEL = dict(n_layer=1, n_head=2, n_embd=16, block_size=16)


def flags(study_dir: Path, data: Path, **overrides) -> list[str]:
    return [f"--{k}={v}" for k, v in {**STUDY, **TRAIN, **MODEL, "study_dir": study_dir, "dataset": data,
                                      **overrides}.items()]


def configs(study_dir: Path, data: Path, **overrides) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    return parse_options([str(a) for a in flags(study_dir, data, **overrides)],
                                (AblateConfig, TrainConfig, GPTConfig), "", "", skip=PER_RUN)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The data and the study trained by one process, uninterrupted: root/data, root/study."""
    root = tmp_path_factory.mktemp("study_records")
    prepare(corpus(), root / "data", "char")
    run_study(*configs(root / "study", root / "data"))
    return root


def without_timings(value):
    """A report's numbers less what a clock measured (seconds, rates, provenance): what must be equal."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items()
                if "seconds" not in k and k not in ("tokens_per_sec", "provenance", "digest", "ablate_config")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def report(study_dir: Path) -> dict:
    """The report's tables and the data of its plots (results.json), less timings."""
    return without_timings(json.loads((study_dir / "results.json").read_text()))


def copy_records(source: Path, target: Path) -> None:
    """What a repository holds of a study folder: everything its .gitignore does not leave out."""
    ignored = [line for line in (source / ".gitignore").read_text().splitlines() if line and line[0] != "#"]
    shutil.copytree(source, target, dirs_exist_ok=True,
                    ignore=lambda folder, names: [n for n in names if any(fnmatch.fnmatch(n, p) for p in ignored)])


def counting(monkeypatch) -> list[str]:
    """The folders train() is asked to train, in order."""
    calls = []
    real = study_run.train

    def train(config, model_config):
        calls.append(Path(config.out_dir))
        return real(config, model_config)

    monkeypatch.setattr(study_run, "train", train)
    return calls


class FakeClock:
    """time.time() for the time box: each training advances it by 10 s; every run is estimated at 10 s."""

    def __init__(self, monkeypatch):
        self.now = 1000.0
        monkeypatch.setattr(study_cost.time, "time", lambda: self.now)  # the time module: study.jobs' too
        monkeypatch.setattr(study_jobs, "run_estimates", lambda plan, *a: [10.0] * len(plan))
        real = study_run.train

        def train(config, model_config):
            self.now += 10.0
            return real(config, model_config)

        monkeypatch.setattr(study_run, "train", train)


def test_a_time_boxed_study_continued_from_its_records_alone_reports_the_same(reference, tmp_path, monkeypatch):
    first = tmp_path / "first"
    clock = FakeClock(monkeypatch)
    with pytest.raises(study_cost.OutOfTime, match="5 of 16 runs finished, 11 left"):
        run_study(*configs(first, reference / "data", time_limit="55s"))
    assert clock.now == 1050.0  # 5 runs of 10 s started; the sixth would have ended at 1060, past 1055
    done = sorted(p.parent.relative_to(first).as_posix() for p in first.glob("*/seed*/*/done.json"))
    assert len(done) == 5 and not (first / "results.json").exists()
    monkeypatch.undo()

    fresh = tmp_path / "fresh"
    copy_records(first, fresh)
    assert not list(fresh.rglob("*.pt")) and (fresh / "study.json").is_file()
    calls = counting(monkeypatch)
    run_study(*configs(fresh, reference / "data"))
    # The 11 runs left train; a branch whose constant-rate start finished in the first sitting has that start's
    # checkpoint trained again (checked against its record) in a temporary folder first.
    trained = [c.relative_to(fresh).as_posix() for c in calls if ".rebuild" not in c.name]
    rebuilt = [c.parent.relative_to(fresh) / c.name.split(".rebuild")[0] for c in calls if ".rebuild" in c.name]
    assert len(trained) == 11 and not set(trained) & set(done)
    assert [p.as_posix() for p in rebuilt] == ["none/seed1337/stable3"]  # finished, its branches not
    assert report(fresh) == report(reference / "study")


def test_records_continue_on_the_same_bytes_prepared_from_another_path(reference, tmp_path, monkeypatch):
    """What a committed study meets on a user's machine: its records, and the same text prepared from another
    file into another folder. The splits' SHA-256s say it is the same data: nothing trains again, the report is
    the same, and no record names either machine's path. Prefetching is bit-identical, so it is no other study."""
    fresh = tmp_path / "fresh"
    copy_records(reference / "study", fresh)
    (tmp_path / "input.txt").write_text(corpus(), encoding="utf-8")
    prepare(corpus(), tmp_path / "elsewhere", "char", source=str(tmp_path / "input.txt"))
    assert json.loads((tmp_path / "elsewhere" / "tokenizer.json").read_text())["source"] == str(tmp_path / "input.txt")
    calls = counting(monkeypatch)
    run_study(*configs(fresh, tmp_path / "elsewhere", report_only=True))
    assert report(fresh) == report(reference / "study")
    run_study(*configs(fresh, tmp_path / "elsewhere", prefetch=False))
    assert calls == [] and report(fresh) == report(reference / "study")
    for path in fresh.rglob("*.json"):  # results.json names the --study_dir it was given, as given
        text = path.read_text(encoding="utf-8")
        assert "elsewhere" not in text and "input.txt" not in text and str(reference) not in text, path
        assert str(tmp_path) not in text or path.name == "results.json", path


def test_records_made_before_vocabulary_sha256_continue_on_data_prepared_with_it(reference, tmp_path, monkeypatch):
    """Every committed record was made on a tokenizer.json without vocabulary_sha256 (issue 57 added it): a clone
    that prepares its data today must still reuse them. The records are made to lack it as those do."""
    fresh = tmp_path / "fresh"
    copy_records(reference / "study", fresh)
    description = json.loads((reference / "data" / "tokenizer.json").read_text())
    assert "vocabulary_sha256" in description  # what prepare writes today
    for path in fresh.rglob("done.json"):
        record = json.loads(path.read_text())
        record["settings"]["data"].pop("vocabulary_sha256", None)
        path.write_text(run_records.sealed({k: v for k, v in record.items() if k != "digest"}))
    calls = counting(monkeypatch)
    run_study(*configs(fresh, reference / "data", prefetch=False))
    assert calls == [] and report(fresh) == report(reference / "study")


def test_runs_finished_by_other_jobs_count_past_the_time_box(reference, tmp_path):
    """With --jobs, the workers finish runs that were unfinished (so estimated above 0) when the box was set; past
    its end the parent still takes their records: the study is whole, not "0 of 16 runs finished"."""
    folder = tmp_path / "study"
    copy_records(reference / "study", folder)  # as if the workers had just finished every run
    ablate_config, train_config, model_config = configs(folder, reference / "data")
    plan = run_plan(ablate_config, train_config, model_config)
    box = study_cost.TimeBox(deadline=0.0, estimates=[10.0] * len(plan))  # long past, every run priced
    records = study_jobs.train_and_evaluate(plan, ablate_config, 8, False, box)
    assert [r["variant"] for r in records] == [run.variant for run in plan]
    assert all("eval" in r for r, run in zip(records, plan, strict=True) if run.role == "run")


def test_two_array_tasks_folders_merged_report_the_same(reference, tmp_path, capsys):
    plan = run_plan(*configs(tmp_path / "a", reference / "data"))
    for index in range(len(plan)):  # even runs on one machine, odd on another (and what they start from)
        task = tmp_path / ("a" if index % 2 == 0 else "b")
        code, _, err = cli(ablate.main, flags(task, reference / "data", run_index=index), capsys)
        assert code == 0, err
    merged = tmp_path / "merged"
    for task in ("a", "b"):
        copy_records(tmp_path / task, merged)  # records only: what each task would commit
    code, out, err = cli(ablate.main, flags(merged, reference / "data", report_only=True), capsys)
    assert code == 0, err
    assert report(merged) == report(reference / "study")


def test_pruning_keeps_a_checkpoint_until_every_branch_exists(reference, tmp_path, monkeypatch):
    study_dir = tmp_path / "study"
    seen = []
    real = study_jobs.prune_checkpoints

    def prune(plan, finished):
        real(plan, finished)
        for run in plan:  # after every prune: a run not finished whose start finished still has that checkpoint
            if (run.start_from is not None and not (run.dir / "done.json").is_file()
                    and (run.start_from / "done.json").is_file()):
                assert (run.start_from / "ckpt.pt").is_file(), run.dir
        seen.append(finished.dir)

    monkeypatch.setattr(study_jobs, "prune_checkpoints", prune)
    result = run_study(*configs(study_dir, reference / "data", keep_checkpoints=False))
    assert len(seen) == 16 and not list(study_dir.rglob("*.pt"))  # all pruned at the end, records kept
    assert report(study_dir) == report(reference / "study")
    assert len(result["runs"]) == 16


@pytest.mark.parametrize("edit", ["iter_num", "missing field", "a folder"])
def test_an_edited_or_incomplete_record_is_refused_in_one_line(reference, tmp_path, capsys, edit):
    study_dir = tmp_path / "study"
    copy_records(reference / "study", study_dir)
    done = study_dir / "learned" / "seed1337" / "4steps" / "done.json"
    record = json.loads(done.read_text())
    if edit == "iter_num":
        record["iter_num"] = 99999  # a hand edit; its digest is now wrong
        done.write_text(json.dumps(record))
    elif edit == "missing field":
        del record["provenance"]
        done.write_text(run_records.sealed({k: v for k, v in record.items() if k != "digest"}))
    else:  # was IsADirectoryError as a traceback
        done.unlink()
        done.mkdir()
    before = sorted(p.name for p in done.iterdir()) if done.is_dir() else done.read_bytes()
    result = cli(ablate.main, flags(study_dir, reference / "data", report_only=True), capsys)
    why = {"iter_num": "no longer match its digest", "missing field": "lacks provenance", "a folder": "a folder"}
    assert_one_line_error(*result, str(done), why[edit], "delete")
    assert (sorted(p.name for p in done.iterdir()) if done.is_dir() else done.read_bytes()) == before


def test_every_record_names_the_one_dtype_of_the_study(reference, tmp_path):
    records = [json.loads(p.read_text()) for p in (reference / "study").glob("*/seed*/*/done.json")]
    assert len(records) == 16
    assert {r["provenance"]["dtype"] for r in records} == {"float32"}  # auto, resolved once for the CPU
    assert {r["settings"]["train_config"]["dtype"] for r in records} == {"float32"}
    study = json.loads((reference / "study" / "study.json").read_text())
    assert study["train_config"]["dtype"] == "float32"
    provenance = records[0]["provenance"]
    assert set(provenance) >= {"commit", "dirty", "torch", "device", "cpu", "cpu_id", "cpu_flags", "threads", "dtype",
                               "wall_seconds"}


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: {stepping}
flags\t\t: fpu sse4_2 avx avx2 fma avx512f {extra}

processor\t: 1
model name\t: another CPU, not the first
"""


def test_two_cpus_of_one_model_name_are_told_apart():
    """provenance names the CPU a run trained on: "AMD EPYC" alone is two machines (their kernels differ in the
    instruction sets a virtual machine passes through). Stepping and the kernel flags tell them apart."""
    first = run_records.cpu_description(CPUINFO.format(stepping=1, extra="avx512_bf16 avx512_vnni"))
    second = run_records.cpu_description(CPUINFO.format(stepping=2, extra=""))
    assert first["cpu"] == second["cpu"] == "AMD EPYC" and first != second
    assert first["cpu_id"] == "vendor_id AuthenticAMD, cpu family 25, model 17, stepping 1"
    assert first["cpu_flags"] == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert second["cpu_flags"] == ["sse4_2", "avx", "avx2", "fma", "avx512f"]
    arm = run_records.cpu_description("CPU implementer\t: 0x41\nCPU part\t: 0xd0c\nFeatures\t: asimd sve\n")
    assert arm["cpu_id"] == "CPU implementer 0x41, CPU part 0xd0c" and arm["cpu_flags"] == ["asimd", "sve"]


def test_a_rebuild_that_differs_names_what_differs_threads_first():
    """A record made with --threads=1, rebuilt with 2: the checkpoint differs, and the message blamed the machine
    ("trained on AMD EPYC, torch ...") though CPU and torch were the same."""
    now = run_records.provenance("float32", 0.0)
    said = study_run.what_differs({**now, "threads": now["threads"] + 1})
    assert f"it trained with {now['threads'] + 1} threads, this process has {now['threads']}" in said
    assert said.endswith(f"give --threads={now['threads'] + 1}")
    said = study_run.what_differs({**now, "cpu": "Another CPU", "cpu_flags": ["avx2"]})
    assert "cpu 'Another CPU' then" in said and "cpu_flags ['avx2'] then" in said and "--threads" not in said
    assert "the same torch" in study_run.what_differs(now)


def test_runs_trained_on_another_cpu_are_named_in_one_line(reference, tmp_path, capsys):
    """A study continued (or gathered) where some records name another CPU: --list_runs and the report say so in
    one line, counting those runs; records of this machine say nothing."""
    code, out, err = cli(ablate.main, flags(reference / "study", reference / "data", list_runs=True), capsys)
    assert code == 0 and "note:" not in out
    study_dir = tmp_path / "study"
    copy_records(reference / "study", study_dir)
    for done in sorted(study_dir.glob("learned/seed1337/*/done.json")):  # 4 runs on an Intel Xeon with AMX
        record = {k: v for k, v in json.loads(done.read_text()).items() if k != "digest"}
        record["provenance"].update(cpu="Intel(R) Xeon(R) Platinum 8480+", cpu_flags=["avx512f", "amx_tile"])
        done.write_text(run_records.sealed(record))
    for mode in ("list_runs", "report_only"):
        code, out, err = cli(ablate.main, flags(study_dir, reference / "data", **{mode: True}), capsys)
        notes = [line for line in out.splitlines() if line.startswith("note:")]
        assert code == 0 and len(notes) == 1, (mode, err)
        assert notes[0].startswith("note: 4 of the 16 finished runs trained on ") and "Xeon" in notes[0]
        assert "report mixes both kinds" in notes[0]


def test_the_time_box_never_starts_a_run_estimated_past_it(monkeypatch):
    box = study_cost.TimeBox(deadline=100.0, estimates=[10.0, 50.0, 0.0])
    monkeypatch.setattr(study_cost.time, "time", lambda: 60.0)
    assert [box.allows(i) for i in range(3)] == [True, False, True]  # 70 <= 100; 110 > 100; a finished run


@pytest.mark.parametrize("text, seconds", [("90m", 5400.0), ("1.5h", 5400.0), ("30s", 30.0), ("", 0.0)])
def test_time_limits_read(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["90", "-5m", "0m", "5x", "inf h"])
def test_a_bad_time_limit_is_one_line(reference, tmp_path, capsys, text):
    result = cli(ablate.main, flags(tmp_path / "study", reference / "data", time_limit=text), capsys)
    assert_one_line_error(*result, f"time_limit={text!r}", "--time_limit=90m")
    assert not (tmp_path / "study").exists()


def test_the_plan_view_prices_runs_from_the_finished_ones(reference, tmp_path, capsys, monkeypatch):
    """--list_runs on a study half finished: finished runs say so, the others are priced from the finished runs'
    own seconds per token trained (one batch size: per step too) and per evaluated token (no probe), and the run
    count stays the last line."""
    partial = tmp_path / "study"
    copy_records(reference / "study", partial)
    for seed_dir in partial.glob("*/seed1338"):
        shutil.rmtree(seed_dir)
    monkeypatch.setattr(study_cost, "probe_token_seconds", lambda run: pytest.fail("probed"))
    code, out, err = cli(ablate.main, flags(partial, reference / "data", list_runs=True), capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[-1].startswith("16 runs: --run_index=0..15")
    assert lines[-2].startswith("8 finished, 8 to run: 18 steps")  # 3 + 1 + 3 + 2 steps per (cell, seed)
    per_step = []  # every finished run's seconds per step: the estimate is their median
    for cell in ("learned", "none"):
        records = [json.loads(p.read_text()) for p in partial.glob(f"{cell}/seed1337/*/done.json")]
        per_step += [r["train_seconds"] / steps for r, steps in zip(
            sorted(records, key=lambda r: r["settings"]["train_config"]["max_iters"]), (3, 1, 3, 2), strict=True)]
    plan = run_plan(*configs(partial, reference / "data"))
    finished = study_jobs.records_on_disk(plan, configs(partial, reference / "data")[0])
    estimates = study_cost.run_estimates(plan, configs(partial, reference / "data")[0], finished)
    for run, record, seconds in zip(plan, finished, estimates, strict=True):
        assert (seconds == 0) == (record is not None)
        if run.role == "stable" and record is None:  # training alone: steps x a finished run's rate, at least
            assert seconds >= steps_of(run) * min(per_step) * 0.999


def test_the_plan_view_prices_the_checkpoints_trained_again(reference, tmp_path, capsys, monkeypatch):
    """Records alone (no checkpoint) with the last branch of one seed left to run: that branch first trains its
    constant-rate run's checkpoint again, and that run's start's (3 + 3 steps), once for the two cells' branches
    each, and --list_runs and the time box count those steps too."""
    partial = tmp_path / "study"
    copy_records(reference / "study", partial)
    for branch in partial.glob("*/seed1338/8steps"):
        shutil.rmtree(branch)
    code, out, err = cli(ablate.main, flags(partial, reference / "data", list_runs=True), capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[-2].startswith("14 finished, 2 to run: 4 steps and 12 to train missing checkpoints again")
    assert sum("(+6 to train its start's checkpoint again)" in line for line in lines) == 2
    plan = run_plan(*configs(partial, reference / "data"))
    finished = study_jobs.records_on_disk(plan, configs(partial, reference / "data")[0])
    assert sum(study_cost.rebuild_steps(plan, finished)) == 12
    for rebuilt in partial.glob("*/seed1338/stable6"):  # one checkpoint back: only the 3 steps after it again
        (rebuilt.parent / "stable3" / "ckpt.pt").write_bytes(b"")
    assert sorted(study_cost.rebuild_steps(plan, finished)) == [0] * 14 + [3, 3]
    monkeypatch.setattr(study_cost, "probe_token_seconds", lambda run: pytest.fail("probed"))
    estimates = study_cost.run_estimates(plan, configs(partial, reference / "data")[0], finished)
    per_step = min(json.loads(p.read_text())["train_seconds"] / 3 for p in partial.glob("*/*/stable*/done.json"))
    for run, seconds in zip(plan, estimates, strict=True):
        if run.dir.name == "8steps" and run.seed == 1338:  # its 2 steps and the 3 trained again, at least
            assert seconds >= 5 * per_step * 0.999


def steps_of(run: dict) -> int:
    return {"stable3": 3, "stable6": 3}[run.dir.name]


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(__import__("torch").cuda.is_available(),
                    reason="the committed studies ran on a CPU; on a GPU 'auto' is another dtype, another study")
def test_every_committed_study_is_the_one_its_config_describes(monkeypatch):
    """A fresh clone continues a committed study (docs/) with its config alone: the study.json there must equal
    what the config describes now (with the data it recorded), or the rerun is refused as another study. A setting
    added to AblateConfig later must leave the identity of a study that does not use it as it was
    (study_folder.EXTRA_FIELDS)."""
    monkeypatch.chdir(ROOT)
    checked = []
    for path in sorted((ROOT / "config").glob("ablate_*.py")):
        settings, train_config, model_config = ablate.read_options([str(path)])  # as ablate.py reads it
        stored = Path(settings.study_dir) / study_folder.STUDY_FILE
        if not stored.is_file():
            continue
        recorded = json.loads(stored.read_text())
        # The prepared data's identity is the machine's (a fresh clone has none prepared): the configs are checked.
        monkeypatch.setattr(run_records, "resolve_data_dir", lambda dataset: dataset)
        monkeypatch.setattr(run_records, "read_description", lambda data_dir, data=recorded["data"]: data)
        identity = json.loads(json.dumps(study_folder.study_identity(settings, train_config, model_config)))
        cells = recorded["ablate_config"].pop("cells")
        assert identity == recorded, path.name
        assert cells == [cell_name(cell) for cell in study_cells(settings)], path.name
        checked.append(path.name)
    assert "ablate_positions_budgets.py" in checked and len(checked) >= 5


def test_pruning_reaches_checkpoints_trained_again_two_runs_back(reference, tmp_path):
    """Records alone, the last branch of a seed to run: its start (stable6) and that start's (stable3) are trained
    again, and --keep_checkpoints=False pruned the first but never the second."""
    fresh = tmp_path / "fresh"
    copy_records(reference / "study", fresh)
    for branch in fresh.glob("*/seed1338/8steps"):
        shutil.rmtree(branch)
    run_study(*configs(fresh, reference / "data", keep_checkpoints=False))
    assert not list(fresh.rglob("*.pt"))
    assert report(fresh) == report(reference / "study")


def test_the_report_names_the_threads_the_runs_trained_on(reference, tmp_path, capsys):
    """Was: the thread count of the process that wrote the report, whatever the runs had."""
    import torch

    study_dir = tmp_path / "study"
    copy_records(reference / "study", study_dir)
    try:
        code, _, err = cli(ablate.main, flags(study_dir, reference / "data", report_only=True, threads=3), capsys)
    finally:
        torch.set_num_threads(1)
    assert code == 0, err
    text = (study_dir / "results.md").read_text()
    assert "each run on 1 torch thread(s)" in text and "3 torch thread" not in text


def test_the_time_to_target_table_is_recomputed_from_the_records(reference, tmp_path, capsys):
    """results.json's time-to-target rows from the committed records alone: the loss of each seed's final model
    (eval.json), its whole training time (done.json's train_seconds along the runs it continues), by hand."""
    from scipy import stats

    study_dir = tmp_path / "study"
    copy_records(reference / "study", study_dir)
    code, _, err = cli(ablate.main, flags(study_dir, reference / "data", report_only=True, target_loss=3.5,
                                          reference="learned"), capsys)
    assert code == 0, err
    rows = {(row["variant"], row["budget"]): row for row in json.loads((study_dir / "results.json").read_text())[
        "target"]}
    assert sorted(rows) == [("learned", 4), ("learned", 8), ("none", 4), ("none", 8)]  # every budget: how soon
    rows = {cell: rows[cell, 8] for cell in ("learned", "none")}

    def seconds(run: Path) -> float:  # the 8-step branch and the constant-rate run it starts from
        done = json.loads((run / "done.json").read_text())
        start = done["settings"]["run"]["starts_from"]
        return done["train_seconds"] + (seconds(run.parent / start) if start else 0.0)

    for cell in ("learned", "none"):
        runs = sorted((study_dir / cell).glob("seed*/8steps"))
        losses = np.array([json.loads((r / "eval.json").read_text())["protocols"]["nonoverlapping"]["16"]["loss"]
                           for r in runs])
        t = (losses.mean() - 3.5) / (losses.std(ddof=1) / np.sqrt(len(losses)))
        assert rows[cell]["p_at_most_target"] == pytest.approx(stats.t.cdf(t, len(losses) - 1), rel=1e-9)
        times = sorted(seconds(r) for r in runs)
        assert rows[cell]["seconds"]["min"] == pytest.approx(times[0]) and len(times) == rows[cell]["seeds"] == 2
    learned = {r.parent.name: seconds(r) for r in (study_dir / "learned").glob("seed*/8steps")}
    none = {r.parent.name: seconds(r) for r in (study_dir / "none").glob("seed*/8steps")}
    ratio = np.exp(np.mean([np.log(none[s] / learned[s]) for s in learned]))
    assert rows["none"]["time_ratio"]["ratio"] == pytest.approx(ratio, rel=1e-9)
    assert "## Time to the target: test loss <= 3.5 at L = block_size" in (study_dir / "results.md").read_text()


def test_compare_to_keeps_the_pairs_with_its_cells():
    from study.report import study_comparisons

    records = [{"variant": cell, "seed": seed, "eval": {"tokens": 100, "bytes": 100, "chars": 100, "protocols": {
        "nonoverlapping": {"16": {"loss": 2.0 + 0.1 * i + 0.01 * seed * (i + 1)}}}}}
        for i, cell in enumerate("abc") for seed in range(3)]
    ablate_config = AblateConfig(protocols=["nonoverlapping"], eval_multipliers=[1.0])

    def pairs(**overrides) -> set:
        found = study_comparisons(records, ["a", "b", "c"], [16], replace(ablate_config, **overrides), 16)
        return {(row["a"][0], row["b"][0]) for row in found["training length"]}

    assert pairs() == {("a", "b"), ("a", "c"), ("b", "c")}
    assert pairs(compare_to=["a"]) == {("a", "b"), ("a", "c")}
    assert pairs(compare_to=["a", "c"]) == {("a", "b"), ("a", "c"), ("b", "c")}


def test_a_report_redrawn_keeps_how_the_runs_ran_and_takes_the_labels(reference, tmp_path, capsys):
    """Was: --report_only wrote its own jobs=1 over the recorded jobs=2 of the invocation that trained the runs
    (docs/context_extension). A label given then names the cell in the tables; its folder and records keep its
    name."""
    study_dir = tmp_path / "study"
    copy_records(reference / "study", study_dir)
    recorded = json.loads((study_dir / "results.json").read_text())
    recorded["ablate_config"].update(jobs=2, time_limit="60m", report_only=False)
    (study_dir / "results.json").write_text(json.dumps(recorded))
    code, _, err = cli(ablate.main, flags(study_dir, reference / "data", report_only=True,
                                          labels="no positions: none"), capsys)
    assert code == 0, err
    redrawn = json.loads((study_dir / "results.json").read_text())
    assert {k: redrawn["ablate_config"][k] for k in ("jobs", "time_limit", "report_only")} == {
        "jobs": 2, "time_limit": "60m", "report_only": False}
    assert redrawn["labels"] == {"learned": "learned", "none": "no positions"}
    assert "| no positions | learned |" in (study_dir / "results.md").read_text()
    assert [row["variant"] for row in redrawn["summary"]] == ["learned", "none"]


def test_a_growing_batch_is_priced_by_the_tokens_it_trains(tmp_path, monkeypatch):
    """Was: training priced per step, so a run whose batch grows from 1 to 4 sequences over its first 4 steps cost
    a whole 8 steps of 4, and the probe timed 20 steps of the smallest batches. Priced per token trained: its
    sequences are 1 + 3s // 4 at steps s = 0..3 (1, 1, 2, 3), then 4, each of 16 tokens."""
    prepare(corpus(), tmp_path / "data", "char")
    grown = "learned batch_size_warmup=4 batch_size_start=1"
    plan = run_plan(*configs(tmp_path / "study", tmp_path / "data", variants=f"learned,{grown}", budgets=8,
                             lr_schedule="cosine"))
    assert sorted(run.variant for run in plan) == ["learned"] * 2 + [grown] * 2
    plain_tokens, grown_tokens = 8 * 4 * 16, (1 + 1 + 2 + 3 + 4 * 4) * 16
    rate = 0.001  # seconds per token of the finished runs
    finished = [{"train_seconds": rate * plain_tokens, "eval": {"seconds": 1.0}} if run.variant == "learned" else None
                for run in plan]
    monkeypatch.setattr(study_cost, "probe_token_seconds", lambda run: pytest.fail("probed"))
    estimates = study_cost.run_estimates(plan, configs(tmp_path / "study", tmp_path / "data")[0], finished)
    assert estimates == [0.0 if run.variant == "learned" else pytest.approx(rate * grown_tokens + 1.0)
                         for run in plan]  # the evaluation: the finished runs' second, the same tokens

    probed = []  # before any run finished: the probe times full steps, the schedule off
    monkeypatch.undo()

    def train(config, model_config):
        probed.append(config.batch_size_warmup)
        return {"step_seconds": [9.0] + [rate * 4 * 16] * study_cost.PROBE_STEPS}

    monkeypatch.setattr(study_cost, "train", train)
    estimates = study_cost.run_estimates(plan, configs(tmp_path / "study", tmp_path / "data")[0], [None] * 4)
    assert probed == [0]
    by_cell = {run.variant: seconds for run, seconds in zip(plan, estimates, strict=True)}
    assert by_cell[grown] - by_cell["learned"] == pytest.approx(rate * (grown_tokens - plain_tokens))
