"""bench.py --what=muon: what Muon's orthogonalisation costs at fewer iterations (--muon_orthogonalize_steps), in
float32 (--muon_orthogonalize_dtype) and under AOL's scaling (--muon_orthogonalize_scaling) on the config's model,
and what it gives up. One Muon step on the blocks' matrices (the optimizer part train.py builds for them: torch's
Muon for newton_schulz in bfloat16, ours otherwise) at each of STEPS for both methods in bfloat16, scaled by the
Frobenius norm and by AOL, and at STEPS[0] in float32, the rows taking turns step by step in alternating rounds,
each row's time over its method's at 5 steps in bfloat16 (Frobenius) in the same round;
and how far the orthogonalised matrix lands from the exact polar factor U V^T (an SVD in float64), relative to its
norm, the median over the matrices: for Gaussian matrices of the blocks' shapes, and for the model's gradients on
a batch of its training data (at initialisation).

    OMP_NUM_THREADS=1 python bench.py config/speedrun_cpu_gpt2.py --what=muon --clock=cpu --bench_steps=20

A figure for docs/training.md's optimizer options (the speedruns' optimizer options, off by default).
"""

import copy
import statistics
from dataclasses import replace

import torch

from benchmarks.common import BenchConfig, bench_clock, figure, seconds
from errors import OptionError
from model import GPT, GPTConfig
from text.dataset import get_batch, load_split, resolve_data_dir, sample_offsets
from text.tokenizer import read_description
from train import TrainConfig, model_vocab_size
from training.devices import choose_device
from training.optimizers import ORTHOGONALIZATIONS, ORTHOGONALIZE_DTYPES, build_optimizer, muon_matrices, orthogonalize

STEPS = (5, 4, 3, 2)  # muon_orthogonalize_steps timed; the first is the one each row is compared with


def polar_distance(matrix: torch.Tensor, method: str, group: dict, dtype: torch.dtype, scaling: str = "frobenius"
                   ) -> float:
    """||orthogonalize(matrix) - U V^T||_F / ||U V^T||_F, with U S V^T the matrix's SVD in float64."""
    u, _, vh = torch.linalg.svd(matrix.double().cpu(), full_matrices=False)
    exact = u @ vh
    return ((orthogonalize(matrix, method, group, dtype, scaling).double().cpu() - exact).norm() / exact.norm()).item()


def model_with_gradients(config: TrainConfig, model_config: GPTConfig, device: torch.device) -> GPT:
    """The config's model at initialisation (seeded as train.py seeds it), its gradients those of one training batch."""
    torch.manual_seed(config.seed)
    model = GPT(model_config).to(device)
    data = load_split(resolve_data_dir(config.dataset), "train", model_config.block_size)
    offsets = sample_offsets(len(data), model_config.block_size, config.batch_size, torch.Generator().manual_seed(0))
    x, y = get_batch(data, offsets, model_config.block_size, device)
    model(x, y)[1].backward()
    return model


def bench_muon(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures): each (method, steps) row's Muon step, timed beside the others
    in every round (odd rounds and odd steps in the reverse order), its median time, its time over its method's at
    STEPS[0] (the median over the rounds of each round's ratio; > 1 is slower), and its distances from U V^T."""
    if config.optimizer != "muon":
        raise OptionError(f"optimizer={config.optimizer!r}: the Muon benchmark times Muon's step; give "
                          "--optimizer=muon (a config that trains with it: config/speedrun_cpu_gpt2.py)")
    device = choose_device(config.device)
    clock = bench_clock(bench, device)
    model_config = replace(model_config, vocab_size=model_vocab_size(read_description(resolve_data_dir(
        config.dataset))), dropout=0.0)
    model = model_with_gradients(config, model_config, device)
    gradients = [p.grad for p in muon_matrices(model)]
    rows = {f"{method}, {steps} steps": replace(config, muon_orthogonalize=method, muon_orthogonalize_steps=steps,
                                                muon_orthogonalize_dtype="bfloat16",
                                                muon_orthogonalize_scaling="frobenius")
            for method in ORTHOGONALIZATIONS for steps in STEPS}
    rows |= {f"{method}, {steps} steps, aol": replace(config, muon_orthogonalize=method,
                                                      muon_orthogonalize_steps=steps,
                                                      muon_orthogonalize_dtype="bfloat16",
                                                      muon_orthogonalize_scaling="aol")
             for method in ORTHOGONALIZATIONS for steps in STEPS}
    rows |= {f"{method}, {STEPS[0]} steps, float32": replace(config, muon_orthogonalize=method,
                                                             muon_orthogonalize_steps=STEPS[0],
                                                             muon_orthogonalize_dtype="float32",
                                                             muon_orthogonalize_scaling="frobenius")
             for method in ORTHOGONALIZATIONS}
    muons = {}
    for row, row_config in rows.items():
        copied = copy.deepcopy(model)  # each row steps its own weights (a copy holds no gradients: given here)
        for matrix, gradient in zip(muon_matrices(copied), gradients, strict=True):
            matrix.grad = gradient.clone()
        muons[row] = build_optimizer(copied, row_config, device.type).parts[0]
    for muon in muons.values():
        for _ in range(bench.warmup_steps):
            muon.step()
    order = list(rows)
    rounds = []
    for r in range(bench.rounds):
        times = {row: [] for row in order}
        turn = order if r % 2 == 0 else order[::-1]
        for step in range(bench.bench_steps):
            for row in turn if step % 2 == 0 else turn[::-1]:
                times[row].append(seconds(muons[row].step, clock, device))
        rounds.append({row: statistics.median(t) for row, t in times.items()})
    g = torch.Generator().manual_seed(config.seed)
    gaussian = [torch.randn(p.shape, generator=g).to(device) for p in gradients]
    table = (f"Muon step (vs {STEPS[0]} steps: time over its method's at {STEPS[0]} in bfloat16, Frobenius-scaled; "
             "from U V^T: relative, median over the matrices)")
    figures = []
    for row, row_config in rows.items():
        base = f"{row_config.muon_orthogonalize}, {STEPS[0]} steps"
        group = muons[row].param_groups[0]
        figures += [
            figure(table, row, "a step", 1e3 * statistics.median(times[row] for times in rounds), "ms"),
            figure(table, row, f"vs {STEPS[0]} steps",
                   statistics.median(times[row] / times[base] for times in rounds), "x"),
            *(figure(table, row, f"from U V^T, {name}", statistics.median(
                polar_distance(m, row_config.muon_orthogonalize, group,
                               ORTHOGONALIZE_DTYPES[row_config.muon_orthogonalize_dtype],
                               row_config.muon_orthogonalize_scaling) for m in matrices),
                "relative")
              for name, matrices in (("Gaussian", gaussian), ("gradients", gradients)))]
    shapes = ", ".join(dict.fromkeys("x".join(map(str, p.shape)) for p in gradients))
    return (f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"n_layer {model_config.n_layer}, n_embd {model_config.n_embd}: {len(gradients)} matrices ({shapes}); "
            f"{bench.rounds} alternating rounds of {bench.bench_steps} steps a row, the rows taking turns step by "
            f"step (medians); gradients of one batch of {config.batch_size} x {model_config.block_size} tokens"
            ), figures
