"""bench.py --what=gpu_check on a CPU: its report (check.json, summary.md) with each training section's MFU
against the peak the device section measured; the CUDA-only sections skipped with the reason; a section that
fails or runs past its limit recorded with its error line while the others still run (in this process, and each
in a process of its own); the options it would not read refused. The pytest -m gpu section is left out here (it
would run the suite inside the suite): its counts are read from pytest's own summary lines."""

import json
from types import SimpleNamespace

import pytest
import torch

import bench
from benchmarks import gpu_check
from benchmarks.common import BenchConfig
from errors import OptionError, UserError
from model import GPTConfig
from options import chosen_values
from train import TrainConfig

TINY = ["--what=gpu_check", "--device=cpu", "--bench_steps=2", "--warmup_steps=1", "--max_new_tokens=4"]


def run_check(folder, dataset, sections: str, *flags: str) -> tuple[dict, str]:
    bench.main([*TINY, f"--dataset={dataset}", f"--out={folder}", f"--sections={sections}", *flags])
    return json.loads((folder / "check.json").read_text()), (folder / "summary.md").read_text()


def test_the_cpu_check_reports_mfu_against_its_peak_and_skips_what_needs_cuda(tmp_path, char_data):
    report, summary = run_check(tmp_path / "check", char_data,
                                "device,train_baby,train_124m,decode_cached,decode_cuda_graphs", "--isolate=False")
    sections = report["sections"]
    assert list(sections) == list(gpu_check.SECTIONS)  # every section, in order, each with its status
    assert [name for name, r in sections.items() if r["status"] == "ok"] == [
        "device", "train_124m", "train_baby", "decode_cached"]
    peak = sections["device"]["values"]["peak_flops"]
    assert peak > 0 and sections["device"]["values"]["dtype"] == "float32"
    for name in ("train_baby", "train_124m"):
        values = sections[name]["values"]
        # PaLM's count, written here: 6 per weight but the position table, 12 * layers * width * context
        per_token = 6 * (values["parameters"] - 32 * 32) + 12 * 2 * 32 * 32
        assert values["mfu"] == pytest.approx(values["tokens_per_s"] * per_token / peak)
        assert values["steps"] == 3 and "on a CPU: 2 layers of 32" in sections[name]["line"]
        assert f"MFU {values['mfu']:.1%} of the measured peak" in sections[name]["line"]
    assert sections["train_124m"]["values"]["compile"] is False  # eager on a CPU: compiling outlasts the steps
    decode = sections["decode_cached"]["values"]
    assert decode["of_bandwidth_floor"] == decode["step_tokens_per_s"] / decode["bandwidth_floor_tokens_per_s"]
    assert decode["generate_tokens_per_s"] > 0
    for name in ("decode_cuda_graphs", "decode_cuda_graphs_bf16"):
        assert sections[name]["status"] == "skipped"
    assert sections["decode_cuda_graphs"]["reason"] == "CUDA graphs need a CUDA device; this run's device is cpu"
    assert sections["gpu_tests"]["reason"] == "not in --sections"
    assert "4 ok, 0 failed, 6 skipped" in summary and "Failed:" not in summary
    assert "| decode_cuda_graphs | skipped |  | CUDA graphs need a CUDA device; this run's device is cpu |" in summary
    with pytest.raises(UserError, match="already exists; give a new folder"):  # a report is never overwritten
        run_check(tmp_path / "check", char_data, "device")


def test_the_bandwidth_floor_counts_the_weights_in_the_dtype_they_are_stored_in(tmp_path, monkeypatch):
    """decode_cuda_graphs runs bfloat16 autocast over float32 weights: every step reads each weight's 4 bytes (and
    casts them), so its floor counts 4 bytes a weight, not the 2 of the matmuls' dtype. Autocast in bfloat16 as on
    a GPU (here on the CPU), at a copy bandwidth of 1 GB/s."""
    from model import GPT

    monkeypatch.setattr(gpu_check, "choose_dtype", lambda name, device: torch.bfloat16)
    monkeypatch.setattr(gpu_check, "copy_bandwidth", lambda device, megabytes: 1e9)
    check = gpu_check.Check(BenchConfig(what="gpu_check", max_new_tokens=4), torch.device("cpu"), "unused",
                            tmp_path)
    values = gpu_check.decode_run(check, "cached")["values"]
    assert (values["weights"], values["matmuls"]) == ("float32", "bfloat16")
    shape = {k: v for k, v in gpu_check.CPU_SHAPE.items() if k != "batch_size"}
    model = GPT(GPTConfig(**shape, vocab_size=gpu_check.GPT2_VOCAB))
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cache = 2 * shape["n_layer"] * (shape["block_size"] // 2) * shape["n_embd"] * 4  # float32, half-way
    assert values["bandwidth_floor_tokens_per_s"] == pytest.approx(1e9 / (4 * weights + cache))


# Stands in for nanoGPT's train.py: keeps what it was given (its settings, the tokens of its data folder, whether
# a meta.pkl and its configurator.py are there) and prints steps 0..max_iters as nanoGPT does, step i taking
# (i + 1)² x 100 ms, or fails where FAIL is set.
NANOGPT_STAND_IN = """
import json, os, sys
from pathlib import Path
import numpy as np
if os.environ.get("FAIL"):
    sys.exit("no CUDA GPUs are available")
settings = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
data = Path("data") / settings["dataset"]
tokens = np.fromfile(data / "train.bin", dtype=np.uint16)
Path(os.environ["GIVEN"]).write_text(json.dumps({"settings": settings, "max_token": int(tokens.max()),
    "tokens": len(tokens), "meta": (data / "meta.pkl").exists(), "configurator": Path("configurator.py").is_file()}))
for i in range(int(settings["max_iters"]) + 1):
    print(f"iter {i}: loss 10.9000, time {(i + 1) ** 2 * 100.0:.2f}ms, mfu -100.00%")
"""


def test_nanogpts_train_py_is_timed_on_the_124m_sections_shape_and_counted_by_our_formula(tmp_path, char_data,
                                                                                          monkeypatch):
    nanogpt = tmp_path / "nanoGPT"
    nanogpt.mkdir()
    (nanogpt / "train.py").write_text(NANOGPT_STAND_IN)
    (nanogpt / "configurator.py").write_text("")
    monkeypatch.setenv("GIVEN", str(tmp_path / "given.json"))
    report, summary = run_check(tmp_path / "check", char_data, "device,train_124m,nanogpt_124m", "--isolate=False",
                                f"--nanogpt_dir={nanogpt}", "--bench_steps=3")
    ours, theirs = report["sections"]["train_124m"]["values"], report["sections"]["nanogpt_124m"]["values"]
    given = json.loads((tmp_path / "given.json").read_text())
    shape = gpu_check.CPU_SHAPE
    assert given["settings"] | {"out_dir": "x"} == {
        "batch_size": "4", "gradient_accumulation_steps": "1", "compile": "False", "block_size": "32", "n_layer": "2",
        "n_head": "2", "n_embd": "32", "bias": "True", "dropout": "0.0", "device": "cpu", "dtype": "float32",
        "max_iters": "4", "eval_interval": str(10**9), "eval_iters": "1", "log_interval": "1",
        "always_save_checkpoint": "False", "wandb_log": "False", "dataset": "gpu_check", "out_dir": "x"}
    assert given["max_token"] < 50257 and given["tokens"] > shape["block_size"] * shape["batch_size"]
    assert not given["meta"] and given["configurator"]  # no meta.pkl: nanoGPT builds its 50,304-token head
    # steps 1 to 3 are timed after the one warm-up step: 400, 900 and 1600 ms, their median 900 ms
    assert theirs["tokens_per_s"] == pytest.approx(shape["batch_size"] * shape["block_size"] / 0.9)
    assert theirs["first_step_s"] == pytest.approx(0.1) and theirs["steps"] == 4
    # the same FLOPs a token as train_124m's model (PaLM's count, written out in the first test)
    assert theirs["achieved_flops"] / theirs["tokens_per_s"] == pytest.approx(
        ours["achieved_flops"] / ours["tokens_per_s"])
    assert theirs["mfu"] == pytest.approx(theirs["achieved_flops"] / report["sections"]["device"]["values"][
        "peak_flops"])
    assert "| nanogpt_124m | ok |" in summary and "142 tokens/s (nanoGPT's train.py, float32, eager" in summary

    monkeypatch.setenv("FAIL", "1")
    report, summary = run_check(tmp_path / "again", char_data, "nanogpt_124m", "--isolate=False",
                                f"--nanogpt_dir={nanogpt}")
    assert report["sections"]["nanogpt_124m"]["error"] == (
        "RuntimeError: nanoGPT's train.py exited 1 after printing 0 of 3 steps: no CUDA GPUs are available")


def test_without_a_nanogpt_checkout_its_section_says_how_to_run_it(tmp_path, char_data):
    report, _ = run_check(tmp_path / "check", char_data, "nanogpt_124m", "--isolate=False")
    assert report["sections"]["nanogpt_124m"] == {
        "status": "skipped", "reason": "no --nanogpt_dir: give a checkout of karpathy/nanoGPT to time its train.py "
                                       "beside train_124m"}


def test_the_gpu_tests_run_on_at_most_8_workers_sharing_the_cores_among_their_compilers(tmp_path, monkeypatch):
    calls = []

    def run(command, **kwargs):
        calls.append((command, kwargs["env"]))
        raise KeyboardInterrupt  # the command is all this test wants

    monkeypatch.setattr(gpu_check.subprocess, "run", run)
    for cores, workers, threads in ((16, 8, 2), (2, 2, 1), (64, 8, 8)):
        monkeypatch.setattr(gpu_check.os, "cpu_count", lambda cores=cores: cores)
        with pytest.raises(KeyboardInterrupt):
            gpu_check.gpu_tests_section(SimpleNamespace(folder=tmp_path))
        command, environment = calls.pop()
        assert f"--numprocesses={workers}" in command
        assert environment["TORCHINDUCTOR_COMPILE_THREADS"] == str(threads)


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path, char_data, monkeypatch):
    def fail(check):
        raise RuntimeError("forced failure\nsecond line")
    monkeypatch.setitem(gpu_check.SECTIONS, "train_baby", gpu_check.Section(fail, 60))
    report, summary = run_check(tmp_path / "check", char_data, "train_baby,decode_cached", "--isolate=False")
    sections = report["sections"]
    assert sections["train_baby"]["status"] == "failed"
    assert sections["train_baby"]["error"] == "RuntimeError: forced failure"
    assert sections["decode_cached"]["status"] == "ok"  # after the failure
    assert "0 ok" not in summary and "1 failed" in summary
    assert summary.endswith("Failed:\n- train_baby: RuntimeError: forced failure\n")


@pytest.mark.slow
def test_isolated_sections_run_in_their_own_process_and_one_past_its_limit_is_killed(tmp_path, char_data,
                                                                                      monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setitem(gpu_check.SECTIONS, "device", gpu_check.Section(gpu_check.device_section, 0.5))
    report, summary = run_check(tmp_path / "check", char_data, "device,train_baby")
    sections = report["sections"]
    assert sections["device"] == {"status": "failed", "error": "timed out after 0.5 s (its limit)",
                                  "seconds": pytest.approx(0.5, abs=0.4)}
    assert sections["train_baby"]["status"] == "ok"  # its result read back from its own process
    assert sections["train_baby"]["values"]["steps"] == 3
    assert "no measured peak" in sections["train_baby"]["line"]
    assert "iter 3: train loss" in (tmp_path / "check" / "train_baby.log").read_text()
    assert not list((tmp_path / "check").glob(".*.json"))  # the result files handed back are gone
    assert "- device: timed out after 0.5 s (its limit)" in summary


@pytest.mark.parametrize("flags", [["--sections=device,train_baby", "--out=x"], ["--sections", "device", "--out", "x"]])
def test_an_isolated_section_is_started_with_its_own_section_and_folder_only(flags, tmp_path, monkeypatch):
    """The check's own --sections and --out are dropped from the section's command line, not repeated (a list
    flag given twice is refused): the command, read by bench.py's own parser, names the one section."""
    commands = []

    def popen(command, **kwargs):
        commands.append(command)
        raise KeyboardInterrupt  # the command is all this test wants; nothing is started

    monkeypatch.setattr(gpu_check.subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.run_isolated("train_baby", SimpleNamespace(folder=tmp_path), [*TINY, *flags], limit=1)
    chosen = chosen_values(commands[0][2:], (BenchConfig, TrainConfig, GPTConfig), skip=("vocab_size",))
    assert (chosen["sections"], chosen["out"], chosen["bench_steps"]) == (["train_baby"], str(tmp_path), 2)


@pytest.mark.parametrize("output, counts", [
    ("....s\n2 failed, 40 passed, 3 skipped, 1100 deselected, 2 warnings in 61.20s (0:01:01)\n",
     {"failed": 2, "passed": 40, "skipped": 3, "deselected": 1100}),
    ("FAILED tests/test_x.py::test_y - assert 1 == 2\n1 failed, 1 error in 3.01s\n", {"failed": 1, "errors": 1}),
    ("45 skipped, 1234 deselected in 20.5s\n", {"skipped": 45, "deselected": 1234}),
    ("no tests ran in 0.01s\n", {}),
])
def test_pytest_counts_are_read_from_its_last_summary_line(output, counts):
    assert gpu_check.pytest_counts(output) == counts


@pytest.mark.parametrize("argv, message", [
    (["--what=gpu_check", "--n_layer=4"], "n_layer would do nothing"),
    (["--what=gpu_check", "--sections=device,decode"], "sections=decode: no such section"),
    (["--what=gpu_check", "--check_seconds=0"], "check_seconds=0.0 must be"),
    (["--what=gpu_check", "--nanogpt_dir=."], "nanogpt_dir='.' has no train.py or configurator.py; give a checkout of "
                                             "karpathy/nanoGPT, or leave --nanogpt_dir out"),
    (["--what=train", "--out=x"], "out: settings of --what=gpu_check"),
])
def test_options_the_check_would_not_read_are_refused_before_it_starts(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match=message):
        bench.main(argv)
    assert not list(tmp_path.iterdir())  # no report folder made
