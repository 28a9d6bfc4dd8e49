"""bench.py's report: each figure as the median (min-max) over separate processes, a single one marked as such."""

import time
from types import SimpleNamespace

import pytest
import torch
from helpers import TORCH, needs_muon, tiny_model

import bench
from benchmarks import decode_speed
from benchmarks.common import WHAT, figure
from errors import UserError
from gpt import fast_decode
from model import GPTConfig
from train import TrainConfig


def test_spread_over_processes_is_median_min_max():
    processes = [[figure("t", "plain", "tokens/s", rate, "tokens/s"),
                  figure("t", "plain", "vs plain", 1.0, "x")] for rate in (1200.0, 1000.0, 1500.0)]
    processes[1].append(figure("t", "compiled", "tokens/s", 2000.0, "tokens/s"))  # one process only
    table = bench.spread_tables(processes).splitlines()
    assert table[0] == "| t | tokens/s | vs plain |"
    assert table[2] == "| plain | 1,200 (1,000–1,500) | 1.00x (1.00x–1.00x) |"
    assert table[3] == "| compiled | 2,000 (once) |  |"


def test_units_format_as_the_readme_writes_them():
    assert bench.spread_cell([0.0312], "%") == "3.1% (once)"
    assert bench.spread_cell([2.5, 3.5], "ms") == "3.00 ms (2.50 ms–3.50 ms)"


# Non-ASCII on purpose: tokens per byte must count UTF-8 bytes, not characters.
TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. Héllo, café 😀\n"
             "You are all resolved rather to die than to famish?\n") * 30


@pytest.mark.gpt2_bpe
def test_tokenizer_table_counts_tokens_per_utf8_byte(tmp_path, capsys):
    import tiktoken

    from text.bpe_train import train_hf

    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    size = len(path.read_bytes())
    bench.main(["--what=tokenizer", f"--input={path}", "--vocab_sizes=300", "--repeats=1", "--rounds=1"])
    lines = capsys.readouterr().out.splitlines()
    header = lines.index("| tokenizer | time to learn | tiktoken encode | HF's own encode | tokens per byte |")
    rows = {line.split(" | ")[0].removeprefix("| "): line.strip("| ").split(" | ")[1:] for line in lines[header + 2:]
            if line.startswith("|")}
    assert list(rows) == ["bpe 300", "GPT-2 (50,257)"]
    # independent counts: HF's own encoder for the learned BPE, tiktoken's GPT-2 for GPT-2
    bpe_ids = train_hf([TINY_TEXT], 300, size, size, progress=False).encode(TINY_TEXT).ids
    gpt2_ids = tiktoken.get_encoding("gpt2").encode_ordinary(TINY_TEXT)
    assert rows["bpe 300"][0].endswith(" s (once)") and rows["bpe 300"][1].endswith(" MB/s (once)")
    assert rows["bpe 300"][2].endswith(" MB/s (once)") and rows["bpe 300"][3] == f"{len(bpe_ids) / size:.3f} (once)"
    assert rows["GPT-2 (50,257)"][0] == "" and rows["GPT-2 (50,257)"][2] == ""
    assert rows["GPT-2 (50,257)"][3] == f"{len(gpt2_ids) / size:.3f} (once)"
    _, figures = bench.bench_tokenizer(bench.BenchConfig(what="tokenizer", input=str(path), vocab_sizes=[300],
                                                         rounds=1))
    per_byte = {f["row"]: f["value"] for f in figures if f["column"] == "tokens per byte"}
    assert per_byte == {"bpe 300": len(bpe_ids) / size, "GPT-2 (50,257)": len(gpt2_ids) / size}


def test_tokenizer_bad_input_is_refused_before_any_process(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(UserError, match="missing.txt' does not exist"):
        bench.main(["--what=tokenizer", f"--input={missing}", "--repeats=3"])
    (tmp_path / "short.txt").write_text("to be or not to be", encoding="utf-8")
    with pytest.raises(UserError, match="vocab_sizes=.*8192 needs 7,935 merges, more than the 18 bytes"):
        bench.main(["--what=tokenizer", f"--input={tmp_path / 'short.txt'}", "--repeats=3"])


@pytest.mark.parametrize("what", ["train", "sample"])
def test_the_tokenizer_benchmarks_settings_are_refused_with_another_benchmark(what, tmp_path, monkeypatch):
    """Was: --what=sample --input=a.txt --vocab_sizes=300 timed decoding as if neither were given."""
    from errors import OptionError

    monkeypatch.setattr(bench, "measure_once", lambda *args: pytest.fail("a benchmark ran"))
    with pytest.raises(OptionError) as refused:
        bench.main([f"--what={what}", f"--input={tmp_path / 'a.txt'}", "--vocab_sizes=300", "--repeats=1"])
    assert str(refused.value) == (f"input, vocab_sizes: settings of --what=tokenizer, which would do nothing with "
                                  f"--what={what}; drop them, or give --what=tokenizer")


class FakeClock:
    """A clock that only the timed work moves, by what each call is given to take."""

    def __init__(self):
        self.now, self.calls = 0.0, []

    def __call__(self) -> float:
        return self.now

    def work(self, name: str, seconds: float):
        def run(*args):
            self.calls.append(name)
            self.now += seconds(len(self.calls)) if callable(seconds) else seconds
        return run


def test_the_decode_step_is_timed_in_alternation_with_floor_passes_and_the_same_statistic():
    clock = FakeClock()
    # the machine slows both alike half-way through, and one step in ten is an outlier: medians see neither
    slow = lambda n, base: base * (3 if n > 40 else 1) * (10 if n % 20 == 0 else 1)  # noqa: E731
    floor = clock.work("floor", lambda n: slow(n, 1.0))
    step = clock.work("step", lambda n: slow(n, 1.25))
    step_rate, floor_rate = decode_speed.decode_step_rate(tiny_model(), step, clock, floor, repeats=30)
    assert clock.calls[:5] == ["step", "floor", "step", "floor", "step"]  # the warm-up step first, then pairs
    assert clock.calls.count("floor") == 30 and clock.calls.count("step") == 31
    assert floor_rate / step_rate == pytest.approx(1.25)


def test_a_generation_is_compared_with_floor_passes_just_before_and_after_it():
    clock = FakeClock()
    floor = clock.work("floor", lambda n: 2.0 if n <= 10 else 4.0)  # the floor slows while the run runs
    took, floor_seconds = decode_speed.floor_around(floor, clock.work("run", 100.0), clock, torch.device("cpu"))
    assert clock.calls == ["floor"] * 10 + ["run"] + ["floor"] * 10
    assert took == 100.0 and floor_seconds == 3.0  # the median of 10 passes of 2 s and 10 of 4 s


def test_step_variants_each_undo_one_choice_of_the_shipped_step():
    variants = decode_speed.step_variants()
    shipped = variants["as shipped"]
    # guard_filter_fn came with torch 2.8: before it every guard is checked, and the two variants are one
    assert shipped["cpp_wrapper"] is True and ("guard_filter_fn" in shipped) == (TORCH >= (2, 8))
    assert variants["every guard checked"] == {k: v for k, v in shipped.items() if k != "guard_filter_fn"}
    assert variants["Python wrapper (no cpp_wrapper)"] == {**shipped, "cpp_wrapper": False}


@pytest.mark.slow
def test_step_variants_table(capsys):
    argv = ["--what=step", "--device=cpu", "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16",
            "--rounds=1", "--repeats=1"]
    if not fast_decode.ISOLATION:  # a torch before 2.13: the variants cannot be compiled side by side
        with pytest.raises(UserError, match=r"torch.compile\(isolate_recompiles=...\) \(2.13\)"):
            bench.main(argv)
        return
    bench.main(argv)
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("| frozen decode step, batch 1, randomized order | a step | vs as shipped |"):]
    assert [line.split(" | ")[0] for line in table[2:5]] == [
        "| as shipped", "| every guard checked", "| Python wrapper (no cpp_wrapper)"]
    assert table[2].endswith("| 1.00x (once) |")
    assert "100 calls of each variant" in "\n".join(lines)


def test_every_benchmark_is_a_choice_of_what():
    assert (*bench.BENCHMARKS, "gpu_check") == WHAT  # the check writes a report of its own (test_gpu_check.py)


@pytest.mark.slow
def test_the_study_benchmark_counts_every_jobs_steps(char_data, monkeypatch):
    """Two jobs at once report the sum of their steps a second; every figure is there for every variant, and the
    one-job eager variant is the 1.00x it is compared to."""
    from benchmarks import study_speed

    monkeypatch.setattr(study_speed, "VARIANTS", (study_speed.StudyVariant("eager, 1 job", False, 1, 1),
                                                  study_speed.StudyVariant("eager, 2 jobs", False, 1, 2)))
    config = TrainConfig(dataset=str(char_data), device="cpu", compile=False, batch_size=2, log_interval=1)
    model_config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8)
    header, figures = study_speed.bench_study(bench.BenchConfig(what="study", bench_steps=6, warmup_steps=1,
                                                                rounds=1), config, model_config)
    cells = {(f["row"], f["column"]): f["value"] for f in figures}
    assert cells[("eager, 1 job", "vs eager, 1 job")] == 1.0
    assert len(cells) == 6 and all(v > 0 for v in cells.values())
    assert "7 steps a job" in figures[0]["table"]


def test_the_study_benchmark_sums_its_jobs_rates(monkeypatch):
    """Each job's steady rate is 1 / its median step after the first; a variant's figure is the sum over its jobs
    (processes run here in line, train() stubbed: the arithmetic, not the machine's speed)."""
    import queue

    from benchmarks import study_speed

    class InLine:
        def __init__(self, target, args):
            self.target, self.args = target, args

        def start(self):
            self.target(*self.args)

        def join(self):
            pass

    monkeypatch.setattr(study_speed.multiprocessing, "get_context", lambda method: SimpleNamespace(
        Queue=queue.Queue, Process=lambda target, args: InLine(target, args)))
    monkeypatch.setattr(study_speed, "train", lambda config, model_config: {"step_seconds": [9.0, 0.25, 0.5, 0.5]})
    variant = study_speed.StudyVariant("eager, 3 jobs", False, 1, 3)
    rate, wall = study_speed.run_variant(variant, TrainConfig(), GPTConfig())
    assert rate == 3 * (1 / 0.5) and wall >= 0  # the first step (compilation, warm-up) left out


def test_the_training_benchmark_refuses_muon_beside_nanogpt():
    """nanoGPT's loops train with AdamW only: timing them beside a Muon run would compare two recipes."""
    from benchmarks.common import BenchConfig
    from benchmarks.train_speed import bench_train
    from errors import OptionError

    with pytest.raises(OptionError, match=r"optimizer='muon': nanoGPT's loops train with AdamW only"):
        bench_train(BenchConfig(nanogpt_dir="../nanoGPT"), TrainConfig(optimizer="muon"), GPTConfig())


@needs_muon
def test_the_training_benchmark_times_muon_as_train_py_builds_it(char_data):
    """With --optimizer=muon the bare loop steps the blocks' four linear maps by Muon (named here, not taken from
    optimizers.py) and everything else by AdamW, fused where torch has it as in train.py, so that its optimizer
    step is the speedrun's."""
    import re

    from benchmarks.common import BenchConfig
    from benchmarks.train_speed import BareLoop, training_variants

    config = TrainConfig(optimizer="muon", dataset=str(char_data), batch_size=2)
    variants = training_variants(BenchConfig(), config, torch.device("cpu"))
    assert variants[0].name == "plain: eager, Muon and fused AdamW"  # torch 2.4 on has a fused CPU AdamW
    assert "+ fused AdamW" not in [v.name for v in variants]
    loop = BareLoop(variants[0], BenchConfig(), config, GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16,
                                                                  vocab_size=96), torch.device("cpu"))
    muon, adamw = loop.optimizer.parts
    stepped_by_muon = {id(p) for group in muon.param_groups for p in group["params"]}
    block_matrices = {id(p) for name, p in loop.model.named_parameters()
                      if re.fullmatch(r"blocks\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight", name)}
    assert stepped_by_muon == block_matrices and len(block_matrices) == 8
    assert adamw.defaults["fused"]
    stepped_by_adamw = {id(p) for group in adamw.param_groups for p in group["params"]}
    assert stepped_by_adamw == {id(p) for p in loop.model.parameters()} - block_matrices
    before = [p.detach().clone() for p in loop.model.parameters()]
    loop.step(time.perf_counter)
    assert all(not torch.equal(b, p) for b, p in zip(before, loop.model.parameters(), strict=True))


def test_the_training_benchmark_times_the_full_batch_under_a_batch_schedule(char_data, monkeypatch):
    """A batch-size schedule's first steps are smaller: timed by train.py and counted as full steps, they made its
    tokens/s (and the overhead) look better than the bare loop's full batch. Both sides take 1 µs a token here, so
    the two rates are 1e6 tokens/s each and the overhead 0 when train.py trains the full batch, as the line says."""
    from benchmarks import train_speed
    from benchmarks.common import BenchConfig
    from train import tokens_per_iter

    def train(config, model_config):  # a step's time is its own tokens at 1 µs each
        return {"step_seconds": [1e-6 * tokens_per_iter(config, model_config, step)
                                 for step in range(config.max_iters)]}

    def bare_loop(variant, bench, config, model_config, device):  # the full batch, at the same 1 µs a token
        seconds = 1e-6 * tokens_per_iter(config, model_config)
        return SimpleNamespace(variant=variant, model=SimpleNamespace(flops_per_token=lambda n: 1.0),
                               step=lambda clock: (seconds, 0.0))

    monkeypatch.setattr(train_speed, "train", train)
    monkeypatch.setattr(train_speed, "BareLoop", bare_loop)
    monkeypatch.setattr(train_speed, "peak_flops", lambda device, dtype, clock: (1e9, "measured"))
    config = TrainConfig(dataset=str(char_data), device="cpu", batch_size=8, batch_size_warmup=100,
                         batch_size_start=1, out_dir=str(char_data.parent / "bench"))
    header, figures = train_speed.bench_train(BenchConfig(bench_steps=4, warmup_steps=1, rounds=1), config,
                                              GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=16))
    rates = {f["column"]: f["value"] for f in figures if f["table"] == "train.py"}
    assert rates["bare loop tokens/s"] == pytest.approx(1e6) and rates["train.py tokens/s"] == pytest.approx(1e6)
    assert rates["overhead"] == pytest.approx(0, abs=1e-9)
    assert header.endswith(f"; batch-size schedule off (batch_size_warmup=100): every step the full {8 * 16:,} "
                           "tokens")
