"""devices.py: the CPU's bfloat16 probe for --dtype=auto, with the timer stubbed so that the choice is known; huge
pages for the decoding command lines, read back from the kernel."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import devices

SHAPES = devices.model_matmul_shapes(768, 128, 65)


def stub_timer(seconds: dict):
    """A timer that reports the given seconds per dtype, and records which dtypes were timed."""
    calls = []

    def timer(dtype, shapes):
        assert shapes == SHAPES  # the probe times the model's own products
        calls.append(dtype)
        return seconds[dtype]
    return timer, calls


@pytest.mark.parametrize(("fp32_ms", "bf16_ms", "chosen"), [
    (10.0, 5.0, torch.bfloat16),  # bfloat16 twice as fast
    (5.0, 10.0, torch.float32),  # bfloat16 slower: the CPU
    (10.0, 8.0, torch.float32),  # 1.25x faster, but within the margin: too little to make the step faster
])
def test_probe_picks_the_faster(fp32_ms, bf16_ms, chosen):
    timer, calls = stub_timer({torch.float32: fp32_ms / 1e3, torch.bfloat16: bf16_ms / 1e3})
    dtype, reason = devices.probe_cpu_dtype(SHAPES, timer, supported=lambda: True)
    assert dtype == chosen
    assert f"{bf16_ms:.2f} ms in bfloat16, {fp32_ms:.2f} ms in float32" in reason
    assert calls == [torch.float32, torch.bfloat16] * 2  # alternated, both dtypes each round


def test_probe_takes_the_best_round():
    """One slow round of bfloat16 (another job got the CPU) does not decide: the best of the rounds counts."""
    seconds = iter([0.010, 0.020, 0.010, 0.004])  # fp32, bf16, fp32, bf16
    dtype, _ = devices.probe_cpu_dtype(SHAPES, lambda dtype, shapes: next(seconds), supported=lambda: True)
    assert dtype == torch.bfloat16


def test_probe_falls_back_to_float32_without_bfloat16():
    timer, calls = stub_timer({torch.float32: 1.0, torch.bfloat16: 0.001})
    dtype, reason = devices.probe_cpu_dtype(SHAPES, timer, supported=lambda: False)
    assert (dtype, calls) == (torch.float32, [])
    assert "no native bfloat16" in reason


def test_only_auto_on_a_cpu_probes(monkeypatch):
    def probe(shapes):
        raise AssertionError("probed")
    monkeypatch.setattr(devices, "probe_cpu_dtype", probe)
    cpu = torch.device("cpu")
    assert devices.choose_training_dtype("float32", cpu, SHAPES) == (torch.float32, "as asked")
    assert devices.choose_training_dtype("bfloat16", cpu, SHAPES) == (torch.bfloat16, "as asked")
    monkeypatch.setattr(devices, "probe_cpu_dtype", lambda shapes: (torch.bfloat16, "stub"))
    assert devices.choose_training_dtype("auto", cpu, SHAPES) == (torch.bfloat16, "auto: stub")


def test_probe_shapes_are_the_models_and_capped():
    assert devices.model_matmul_shapes(768, 128, 65) == [(256, 128, 384), (256, 128, 128), (256, 128, 512),
                                                          (256, 512, 128), (256, 128, 65)]
    assert devices.model_matmul_shapes(100, 768, 50304)[-1] == (100, 768, 3072)


def test_real_probe_leaves_torchs_random_stream_alone():
    """The probe runs between the model's initialisation and training: it must not move the dropout stream."""
    before = torch.get_rng_state()
    seconds = devices.matmul_probe_seconds(torch.float32, [(8, 16, 32)])
    assert 0 < seconds < 1
    assert torch.equal(torch.get_rng_state(), before)


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
import sample, bench, train, devices, torch
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
