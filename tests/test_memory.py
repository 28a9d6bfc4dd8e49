"""memory.py against what a real step allocates on CPU: the bytes of parameters, gradients and AdamW's state,
and the bytes autograd saves for the backward under bf16 autocast, tensor by tensor; the parameter count against
the closed-form count of a GPT-2."""

import pytest
import torch
from helpers import assert_one_line_error, cli

from model import GPT, GPTConfig
from training.memory import (
    MemoryConfig,
    gpt2_config,
    memory_table,
    parameter_counts,
    per_gpu_bytes,
    saved_activation_bytes,
    training_state_bytes,
)

SMALL = GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=500, block_size=32, dropout=0.0)


def test_parameter_counts_match_the_closed_form():
    for name, n_layer, h in [("gpt2", 12, 768), ("gpt2-xl", 48, 1600)]:
        counts = parameter_counts(gpt2_config(name))
        block = 12 * h * h + 13 * h  # c_attn, c_proj, c_fc, c_proj with biases; two LayerNorms
        assert counts["block"] == block
        assert counts["total"] == n_layer * block + 50304 * h + 1024 * h + 2 * h  # + tied table, positions, ln_f
        assert counts["matrices"] == n_layer * 12 * h * h + 50304 * h
    assert parameter_counts(gpt2_config("gpt2"))["total"] == 124_475_904


def test_training_state_equals_what_a_real_adamw_step_holds():
    torch.manual_seed(0)
    model = GPT(SMALL)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    idx = torch.randint(0, SMALL.vocab_size, (2, SMALL.block_size + 1))
    model(idx[:, :-1], idx[:, 1:])[1].backward()
    optimizer.step()
    parameters = list(model.parameters())  # the tied table once
    measured = {"weights": sum(p.numel() * p.element_size() for p in parameters),
                "gradients": sum(p.grad.numel() * p.grad.element_size() for p in parameters),
                "optimizer": sum(t.numel() * t.element_size() for state in optimizer.state.values()
                                 for key, t in state.items() if key != "step")}
    expected = training_state_bytes(parameter_counts(SMALL)["total"])
    assert measured == expected


def saved_bytes(model: GPT, idx: torch.Tensor, targets: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves in one forward pass under bf16 autocast, weights excluded."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
            torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx, targets)
    return sum(storages.values())


@pytest.mark.parametrize("n_layer, n_embd", [(1, 64), (3, 64), (2, 128)])
def test_saved_activations_equal_what_autograd_saves(n_layer, n_embd):
    config = GPTConfig(n_layer=n_layer, n_head=4, n_embd=n_embd, vocab_size=500, block_size=64, dropout=0.0)
    model = GPT(config).train()
    windows = torch.randint(0, config.vocab_size, (4, config.block_size + 1))  # as dataset.get_batch makes them
    measured = saved_bytes(model, windows[:, :-1], windows[:, 1:])
    # autocast's bf16 copies of the weight matrices are saved too: memory.py counts them with DDP's weights.
    copies = 2 * parameter_counts(config)["matrices"]
    expected = saved_activation_bytes(config, tokens=windows[:, :-1].numel()) + copies
    assert measured == pytest.approx(expected, rel=0.005)


def test_fsdp_shards_the_state_and_checkpointing_shrinks_activations():
    config = gpt2_config("gpt2-medium")
    ddp = per_gpu_bytes(config, "ddp", 8, 8192, checkpointing=False)
    fsdp = per_gpu_bytes(config, "fsdp", 8, 8192, checkpointing=False)
    for kind in ("weights", "gradients", "optimizer"):
        assert fsdp[kind] == ddp[kind] / 8
    assert fsdp["activations"] == ddp["activations"]
    on = per_gpu_bytes(config, "ddp", 8, 8192, checkpointing=True)
    assert on["activations"] < ddp["activations"] / 2
    table = memory_table(MemoryConfig())
    xl = 48 * (12 * 1600**2 + 13 * 1600) + (50304 + 1024 + 2) * 1600
    assert f"| gpt2-xl | {xl / 1e6:,.0f}M | {16 * xl / 1e9:.1f} / {2 * xl / 1e9:.1f} |" in table


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_gpu_gb_must_be_a_finite_positive_number(capsys, value):
    """nan and inf passed `<= 0` and sized every GPU as infinite (issue 28)."""
    from training import memory

    result = cli(memory.main, [f"--gpu_gb={value}"], capsys)
    assert_one_line_error(*result, f"gpu_gb={float(value)} must be a finite number > 0")
