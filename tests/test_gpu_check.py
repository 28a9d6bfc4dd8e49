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
        "device", "train_baby", "train_124m", "decode_cached"]
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
    assert "4 ok, 0 failed, 5 skipped" in summary and "Failed:" not in summary
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
    (["--what=train", "--out=x"], "out: settings of --what=gpu_check"),
])
def test_options_the_check_would_not_read_are_refused_before_it_starts(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match=message):
        bench.main(argv)
    assert not list(tmp_path.iterdir())  # no report folder made
