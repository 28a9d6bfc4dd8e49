"""devices.py: --dtype=auto decided by the device alone, whatever the timings; huge pages for the decoding command
lines, read back from the kernel."""

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch


def test_auto_on_a_cpu_is_float32_whatever_the_timings(monkeypatch):
    """The same command trains in one dtype: auto on a CPU decides by the device alone. Timings that flip from one
    call to the next (a loaded machine; older code's start-up probe chose by them) and a CPU that has bfloat16
    change nothing."""
    from train import TrainConfig, training_dtype

    readings = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: (n := next(readings)) * (100.0 if n % 4 < 2 else 1e-3))
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    cpu = torch.device("cpu")
    chosen = [training_dtype(TrainConfig(dtype="auto", device="cpu"), cpu) for _ in range(6)]
    assert chosen == [(torch.float32, "auto on cpu; --dtype=bfloat16 trains in bfloat16")] * 6
    assert training_dtype(TrainConfig(dtype="bfloat16", device="cpu"), cpu) == (torch.bfloat16, "as asked")
    assert training_dtype(TrainConfig(dtype="float32", device="cpu"), cpu) == (torch.float32, "as asked")


def transparent_huge_pages_mode() -> str:
    """The kernel's THP mode (always, madvise or never; empty where there is none: not Linux)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return ""
    return text[text.index("[") + 1:text.index("]")]


# After the command lines' own imports, asks for huge pages as their main() does first, fills a 16 MiB tensor and
# prints how much of this process's memory the kernel mapped in huge pages (KiB).
HUGE_PAGE_PROBE = """
import sample, bench, train, torch
from training import devices
devices.use_huge_pages()
tensor = torch.empty(4 << 20).fill_(1.0)
print(next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")))
"""


@pytest.mark.skipif(transparent_huge_pages_mode() != "madvise",
                    reason="needs Linux's THP in madvise mode, where only an allocation that asks gets huge pages")
@pytest.mark.parametrize(("environment", "huge"), [(None, True), ("0", False)])
def test_large_tensors_get_huge_pages_unless_the_environment_says_no(script_env, environment, huge):
    script_env.pop("THP_MEM_ALLOC_ENABLE", None)
    if environment is not None:
        script_env["THP_MEM_ALLOC_ENABLE"] = environment
    done = subprocess.run([sys.executable, "-c", HUGE_PAGE_PROBE], env=script_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kib = int(done.stdout.split()[-1])
    assert kib >= 7 * 2048 if huge else kib == 0  # 16 MiB at 4 KiB alignment holds at least 7 whole 2 MiB pages


def test_the_decoding_command_lines_ask_for_huge_pages_before_any_tensor(monkeypatch):
    """sample.py first thing; bench.py once its options are read (no tensor yet), for decoding only: training is
    timed as train.py runs it, which does not ask."""
    import bench
    import sample

    calls = []

    def record(name: str, stop: bool = True):
        def called(*args, **kwargs):
            calls.append(name)
            if stop:
                raise SystemExit(0)
        return called
    for module in (sample, bench):
        monkeypatch.setattr(module, "use_huge_pages", record("use_huge_pages", stop=False))
    monkeypatch.setattr(sample, "parse_options", record("parse_options"))
    monkeypatch.setattr(bench, "measure_in_processes", record("measure"))
    for main, argv, expected in [(sample.main, [], ["use_huge_pages", "parse_options"]),
                                 (bench.main, ["--what=sample"], ["use_huge_pages", "measure"]),
                                 (bench.main, ["--what=step"], ["use_huge_pages", "measure"]),
                                 (bench.main, ["--what=train"], ["measure"])]:
        calls.clear()
        with pytest.raises(SystemExit):
            main(argv)
        assert calls == expected, argv


@pytest.mark.parametrize("load, threads, device, said", [(2.5, 2, "cpu", True), (1.0, 4, "cpu", True),
                                                          (0.4, 2, "cpu", False), (3.0, 1, "cpu", False),
                                                          (3.0, 2, "cuda", False)])
def test_a_busy_cpu_is_said_when_torch_runs_threads_there(monkeypatch, load, threads, device, said):
    """At a load average of a core's worth or more, torch's threads wait for each other behind the other work; one
    thread is the way round, and the run keeps the user's thread count."""
    import os

    from training.devices import busy_cpu_note

    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        note = busy_cpu_note(torch.device(device))
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    assert note == (f"note: this CPU is busy (load average {load:.1f} over the last minute; torch runs {threads} "
                    "threads): threads stall each other behind other work, so this run may be far slower than on "
                    f"one; OMP_NUM_THREADS=1 before the command trains on one (its last digits differ from {threads} "
                    "threads')" if said else "")


def test_train_says_a_busy_cpu_to_a_terminal_only(monkeypatch, tmp_path, char_data, capsys):
    import os

    from helpers import run

    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 0.0, 0.0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    run(tmp_path / "log", char_data, max_iters=1, lr_decay_iters=1, warmup_iters=0)
    assert "this CPU is busy" not in capsys.readouterr().err  # a log, a test, a pipe: no note
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run(tmp_path / "terminal", char_data, max_iters=1, lr_decay_iters=1, warmup_iters=0)
    [note] = [line for line in capsys.readouterr().err.splitlines() if "this CPU is busy" in line]
    assert note.startswith("note: this CPU is busy (load average 5.0")


@pytest.fixture(scope="module")
def trained_in_a_module_fixture():
    """As a module fixture that calls train() on CUDA leaves the flags: it runs before the test's own fixtures."""
    torch.backends.cuda.matmul.allow_tf32 = True


# Two tests in this order (one file runs in one worker, in order): the first turns TF32 on as train() does on
# CUDA, in a module fixture and in its body; the second must find it as the worker started
# (conftest.tf32_as_at_start), not as the first left it.
def test_a_test_may_turn_tf32_on_as_train_does_on_cuda(trained_in_a_module_fixture):
    assert torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False


def test_the_next_test_finds_tf32_matmuls_off_again():
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is True  # torch's own
