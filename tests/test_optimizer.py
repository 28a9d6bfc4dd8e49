"""--optimizer: Muon for the blocks' matrices and AdamW for the rest (training/optimizers.py).

Checked against what does not come from that code: the parameter names of the blocks' linear maps, Muon's update
written here from torch's documented formula, torch's own AdamW on copies of the other parameters, an uninterrupted
run (resume), a checkpoint whose groups and an optimizer whose moments were written in by hand (a resume given other
settings), two processes against one (DDP). That the default, AdamW, is unchanged is
test_checkpoint.py::test_a_checkpoint_from_commit_03c7507_resumes_as_that_code_resumed_it (a checkpoint written
before --optimizer existed resumes, as AdamW, to the losses and logits that code gave).
"""

import copy
import math
import shutil

import pytest
import torch
from helpers import (
    REPO,
    assert_one_line_error,
    assert_same_state,
    cli,
    configs,
    digests,
    flags,
    needs_fsdp,
    needs_muon,
    random_ids,
    run,
    tiny_model,
    torchrun,
)

import train as train_module
from errors import UserError
from model import GPT, GPTConfig
from options import parse_options
from train import TrainConfig
from training.checkpoint import load_checkpoint
from training.optimizers import build_optimizer, set_learning_rates
from training.parallel import load_optimizer_state

MUON = dict(optimizer="muon", muon_learning_rate=0.02)


def muon_config(**overrides) -> TrainConfig:
    return TrainConfig(**{**MUON, "learning_rate": 1e-3, **overrides})


# ---- what goes where ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [dict(pos_encoding="learned"), dict(pos_encoding="t5"),
                                      dict(pos_encoding="rope", bias=False)], ids=["learned", "t5", "no_bias"])
@needs_muon
def test_every_parameter_is_in_one_group_and_muon_has_the_blocks_matrices_alone(settings):
    """t5's relative-bias table is a matrix outside the blocks; the head is the token table (tied)."""
    model = GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=2, n_head=2, n_embd=32, **settings))
    optimizer = build_optimizer(model, muon_config(), "cpu")
    grouped = [p for group in optimizer.param_groups for p in group["params"]]
    assert sorted(map(id, grouped)) == sorted(map(id, model.parameters()))  # each once (the tied head once)
    names = {id(p): name for name, p in model.named_parameters()}
    muon, adamw = optimizer.parts
    assert sorted(names[id(p)] for group in muon.param_groups for p in group["params"]) == sorted(
        f"blocks.{i}.{layer}.weight" for i in range(2) for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                      "mlp.c_proj"))
    decayed, not_decayed = adamw.param_groups
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in not_decayed["params"])
    assert any(p is model.lm_head.weight for p in decayed["params"])  # the head, through the table it is


# ---- Muon's update, by hand ---------------------------------------------------------------------------------------

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's docstring (a, b, c), Keller Jordan's


def newton_schulz(update: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """NS_k^(a,b,c) of torch's docstring, in float64: X = G / ||G||_F (the wide way round), X <- aX + (bA + cA^2)X
    with A = X X^T."""
    a, b, c = NS_COEFFICIENTS
    x = update.double()
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / x.norm()
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


@needs_muon
def test_three_muon_steps_are_the_documented_update_and_adamw_steps_the_rest():
    """Per torch's docstring: B_t = mu B_{t-1} + g_t; O_t = NS(g_t + mu B_t) (Nesterov); theta <- theta (1 - gamma
    lambda); theta <- theta - gamma sqrt(max(1, rows / cols)) O_t ("original": Keller Jordan's adjustment). gamma is
    muon_learning_rate times the schedule's factor, here lr / learning_rate = 1/2. torch runs Newton-Schulz in
    bfloat16 (its source; the docstring does not say), so the weights' change agrees to a few percent, its scale
    (the rate, the adjustment, the decay) to a tenth of one."""
    model = tiny_model().train()  # weights of std 0.2: the decay (lambda = 1, 1% a step) moves them visibly
    config = muon_config(weight_decay=1.0, muon_momentum=0.5)  # not torch's default momentum (0.95)
    optimizer = build_optimizer(model, config, "cpu")
    names = {id(p): name for name, p in model.named_parameters()}
    matrices = [p for p in model.parameters() if names[id(p)].startswith("blocks.") and p.dim() == 2]
    others = [p for p in model.parameters() if id(p) not in set(map(id, matrices))]
    start = {id(p): p.detach().double().clone() for p in matrices}
    reference = {id(p): torch.nn.Parameter(p.detach().clone()) for p in others}  # torch's AdamW steps these
    adamw = torch.optim.AdamW([{"params": [reference[id(p)] for p in others if p.dim() == 2], "weight_decay": 1.0},
                               {"params": [reference[id(p)] for p in others if p.dim() < 2], "weight_decay": 0.0}],
                              lr=0.5e-3, betas=(0.9, 0.95), fused=True)
    gradients = []
    for step in range(3):
        model(random_ids(4, 16, seed=step), random_ids(4, 16, seed=10 + step))[1].backward()
        gradients.append({id(p): p.grad.double().clone() for p in matrices})
        for p in others:
            reference[id(p)].grad = p.grad.clone()
        set_learning_rates(optimizer, 0.5e-3, config)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        adamw.step()

    gamma, mu, decay = 0.02 * 0.5, 0.5, 1.0
    for p in matrices:
        theta, buffer = start[id(p)].clone(), torch.zeros_like(start[id(p)])
        for grads in gradients:
            g = grads[id(p)]
            buffer = mu * buffer + g
            theta = theta * (1 - gamma * decay)
            theta = theta - gamma * math.sqrt(max(1, p.shape[0] / p.shape[1])) * newton_schulz(g + mu * buffer)
        expected, found = theta - start[id(p)], p.detach().double() - start[id(p)]
        scale = (found * expected).sum() / (expected * expected).sum()
        # Seen: the scale within 4e-4 of 1, the rest 1% to 3%. The first matrix's scale was 1.018 to 1.030 under
        # match_rms_adamw, momentum 0.95, no Nesterov or other coefficients; its rest 14% under 4 Newton-Schulz steps.
        assert abs(scale - 1) < 5e-3, names[id(p)]
        assert (found - scale * expected).norm() / expected.norm() < 0.05, names[id(p)]
    for p in others:
        assert torch.equal(p, reference[id(p)]), names[id(p)]


@needs_muon
def test_the_schedule_scales_both_rates_by_one_factor():
    model = tiny_model()
    config = muon_config(min_lr=1e-4, warmup_iters=10, lr_decay_iters=100)
    optimizer = build_optimizer(model, config, "cpu")
    for step, factor in ((0, 1 / 11), (10, 1.0), (100, 0.1)):  # warmup (it + 1) / 11, the peak, min_lr / peak
        set_learning_rates(optimizer, train_module.get_lr(step, config), config)
        rates = [group["lr"] for group in optimizer.param_groups]
        assert rates == pytest.approx([0.02 * factor, 1e-3 * factor, 1e-3 * factor], rel=1e-12)


# ---- resume -------------------------------------------------------------------------------------------------------


@needs_muon
def test_resume_under_muon_equals_an_uninterrupted_run(tmp_path, char_data):
    """Bit for bit on a CPU: dropout on (the torch stream), the batches (theirs), Muon's momentum and AdamW's
    moments (ckpt.pt's one optimizer state)."""
    settings = dict(MUON, max_iters=6, lr_decay_iters=6, warmup_iters=2, eval_interval=3, dropout=0.1, n_layer=2)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 3})
    second = run(tmp_path / "b", char_data, **settings, init_from="resume")
    assert [r["iter"] for r in first["train_losses"] + second["train_losses"]] == list(range(1, 7))
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    a, b = load_checkpoint(tmp_path / "a" / "ckpt.pt"), load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert a["config"]["optimizer"] == b["config"]["optimizer"] == "muon"
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for i, state in a["optimizer"]["state"].items():
        assert_same_state(state, b["optimizer"]["state"][i])
    assert {"momentum_buffer"} == set(a["optimizer"]["state"][0]) and "exp_avg" in a["optimizer"]["state"][8]


# Other settings than the run's, each held in the optimizer's groups: the decay, AdamW's betas, Muon's momentum and
# iterations (ns_steps).
GIVEN = dict(weight_decay=0.3, beta1=0.8, beta2=0.9, muon_momentum=0.8, muon_orthogonalize_steps=3)


def as_given(group: dict) -> dict:
    """A saved param group with GIVEN's settings written in by hand (Muon's group has a momentum, AdamW's betas)."""
    if "momentum" in group:
        return {**group, "weight_decay": 0.3, "momentum": 0.8, "ns_steps": 3}
    return {**group, "weight_decay": 0.3 if group["weight_decay"] else 0.0, "betas": (0.8, 0.9)}


@needs_muon
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_resume_steps_with_the_group_settings_it_is_given(tmp_path, char_data, optimizer):
    """3 steps, then 3 resumed with GIVEN: as 3 resumed from a copy of the checkpoint whose groups hold GIVEN, written
    in by hand, bit for bit (losses, weights, moments), and the groups it saves hold GIVEN. Was: torch's
    load_state_dict put the saved groups' settings back, so the note named the new decay, betas and momentum and the
    run stepped with the old ones."""
    settings = dict(optimizer=optimizer, max_iters=3, lr_decay_iters=6, warmup_iters=1, eval_interval=3, n_layer=2)
    run(tmp_path / "given", char_data, **settings)
    shutil.copytree(tmp_path / "given", tmp_path / "written")
    state = torch.load(tmp_path / "written" / "ckpt.pt", weights_only=True)
    state["optimizer"]["param_groups"] = [as_given(group) for group in state["optimizer"]["param_groups"]]
    torch.save(state, tmp_path / "written" / "ckpt.pt")
    given = {k: v for k, v in GIVEN.items() if optimizer == "muon" or not k.startswith("muon_")}
    resumed = {name: run(tmp_path / name, char_data, **{**settings, **given, "max_iters": 6}, init_from="resume")
               for name in ("given", "written")}
    assert resumed["given"]["train_losses"] == resumed["written"]["train_losses"]
    assert_same_state(resumed["given"]["model"].state_dict(), resumed["written"]["model"].state_dict())
    a, b = (load_checkpoint(tmp_path / name / "ckpt.pt")["optimizer"] for name in ("given", "written"))
    assert a["param_groups"] == b["param_groups"] == [as_given(group) for group in a["param_groups"]]
    for i, moments in a["state"].items():
        assert_same_state(moments, b["state"][i])


def step_on(model: GPT, optimizer: torch.optim.Optimizer, config: TrainConfig, seed: int) -> None:
    model(random_ids(4, 16, seed=seed), random_ids(4, 16, seed=10 + seed))[1].backward()
    set_learning_rates(optimizer, config.learning_rate, config)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@needs_muon
def test_loading_keeps_the_moments_and_takes_the_groups_as_built():
    """load_optimizer_state (every resume's: one process, DDP, FSDP, a nanoGPT run continued) into an optimizer built
    with GIVEN, then a step: as that optimizer with the saved moments put in its state by hand, bit for bit. A step
    with the run's settings and the same moments moves every parameter elsewhere: GIVEN is felt by each."""
    config, given = muon_config(), muon_config(**GIVEN)
    trained = tiny_model()
    optimizer = build_optimizer(trained, config, "cpu")
    for seed in range(2):
        step_on(trained, optimizer, config, seed)
    saved = optimizer.state_dict()
    models = [tiny_model() for _ in range(3)]
    optimizers = [build_optimizer(model, settings, "cpu") for model, settings in zip(models, (given, given, config),
                                                                                       strict=True)]
    for model in models:
        model.load_state_dict(trained.state_dict())
    load_optimizer_state(models[0], optimizers[0], saved)
    for by_hand in optimizers[1:]:
        for i, p in enumerate(p for group in by_hand.param_groups for p in group["params"]):
            by_hand.state[p] = copy.deepcopy(saved["state"][i])
    for model, by_hand, settings in zip(models, optimizers, (given, given, config), strict=True):
        step_on(model, by_hand, settings, 2)
    assert_same_state(models[0].state_dict(), models[1].state_dict())
    for loaded, by_hand in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert_same_state(optimizers[0].state[loaded], optimizers[1].state[by_hand])
    assert not any(torch.equal(p, q) for p, q in zip(models[0].parameters(), models[2].parameters(), strict=True))


@pytest.mark.parametrize("trained, asked, old", [("adamw", "muon", False), ("muon", "adamw", False),
                                                 ("adamw", "muon", True)], ids=["adamw_as_muon", "muon_as_adamw",
                                                                                "before_the_field_as_muon"])
@needs_muon
def test_resuming_under_the_other_optimizer_is_one_line(tmp_path, char_data, capsys, trained, asked, old):
    out = tmp_path / "out"
    assert cli(train_module.main, flags(out, char_data, max_iters=2, optimizer=trained), capsys)[0] == 0
    if old:  # as a checkpoint written before --optimizer: its config has no such field
        state = torch.load(out / "ckpt.pt", weights_only=True)
        del state["config"]["optimizer"]
        torch.save(state, out / "ckpt.pt")
    before = digests(out)
    code, stdout, stderr = cli(train_module.main, flags(out, char_data, max_iters=4, init_from="resume",
                                                        optimizer=asked), capsys)
    assert_one_line_error(code, stdout, stderr, f"trained with optimizer='{trained}'", f"this run's is '{asked}'",
                          f"resume with --optimizer={trained}", f"--optimizer={asked} --out_dir=NEW_DIR")
    assert digests(out) == before


def test_a_checkpoint_from_before_the_field_resumes_as_adamw(tmp_path, char_data, capsys):
    out = tmp_path / "out"
    assert cli(train_module.main, flags(out, char_data, max_iters=2), capsys)[0] == 0
    state = torch.load(out / "ckpt.pt", weights_only=True)
    del state["config"]["optimizer"]
    torch.save(state, out / "ckpt.pt")
    assert cli(train_module.main, flags(out, char_data, max_iters=4, init_from="resume"), capsys)[0] == 0
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == 4


# ---- refusals -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, fragments", [
    (dict(optimizer="bogus"), ["optimizer='bogus' must be one of adamw, muon"]),
    (dict(optimizer="muon", muon_learning_rate=0.0), ["muon_learning_rate=0.0 must be a finite number > 0"]),
    (dict(optimizer="muon", muon_learning_rate="nan"), ["muon_learning_rate=nan must be a finite number > 0"]),
    (dict(optimizer="muon", muon_momentum=1.0), ["muon_momentum=1.0 must be in [0, 1)"]),
    (dict(muon_momentum=0.9), ["muon_momentum is a setting of optimizer=muon, and this run's optimizer is adamw",
                               "drop it"]),
    # the decoupled decay multiplies the matrices by 1 - rate x weight_decay: -1 flipped their sign every step
    (dict(optimizer="muon", weight_decay=100), ["weight_decay=100 at Muon's peak rate 0.02 (muon_learning_rate)",
                                                "= -1, not > 0", "give weight_decay < 1/0.02 = 50"]),
    (dict(weight_decay=2000), ["weight_decay=2000 at AdamW's peak rate 0.0006 (learning_rate)", "= -0.2, not > 0",
                               "weight_decay < 1/0.0006 = 1666.67"]),
    (dict(learning_rate=1e-4, min_lr=0.02, weight_decay=50), ["AdamW's peak rate 0.02", "= 0, not > 0"]),
    # min_lr above learning_rate: Muon's rate reaches muon_learning_rate x 2
    (dict(optimizer="muon", learning_rate=1e-4, min_lr=2e-4, muon_learning_rate=0.02, weight_decay=25),
     ["Muon's peak rate 0.04 (muon_learning_rate)", "weight_decay < 1/0.04 = 25"]),
])
def test_bad_optimizer_settings_are_one_line_before_anything_is_written(tmp_path, char_data, capsys, given,
                                                                        fragments):
    code, out, err = cli(train_module.main, flags(tmp_path / "out", char_data, **given), capsys)
    assert_one_line_error(code, out, err, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_decay_factor_above_0_is_taken():
    """The bound is strict and per part: 1 - 0.02 x 49 = 0.02 for Muon; AdamW's part decays by 1 - 6e-4 x 49."""
    assert muon_config(weight_decay=49.0).weight_decay == 49.0
    assert TrainConfig(weight_decay=1666.0).weight_decay == 1666.0


@needs_muon
def test_continuing_a_run_under_the_other_optimizer_names_both(tmp_path, char_data, capsys):
    """Was: "its optimizer state does not fit this model", as for a model of another shape."""
    assert cli(train_module.main, flags(tmp_path / "adamw", char_data, max_iters=2), capsys)[0] == 0
    code, out, err = cli(train_module.main, flags(tmp_path / "muon", char_data, max_iters=2, optimizer="muon",
                                                  init_from=tmp_path / "adamw"), capsys)
    assert code == 0, err
    assert "its optimizer state is optimizer='adamw''s, and this run's optimizer is 'muon'; training its weights " \
           "from step 0" in out
    assert load_checkpoint(tmp_path / "muon" / "ckpt.pt")["iter_num"] == 2  # from step 0


def test_a_torch_without_muon_is_one_line(tmp_path, char_data, capsys, monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon", raising=False)  # before torch 2.9 it is not there
    code, out, err = cli(train_module.main, flags(tmp_path / "out", char_data, optimizer="muon"), capsys)
    assert_one_line_error(code, out, err, "optimizer='muon' needs torch 2.9 or newer", "--optimizer=adamw with "
                          "Muon's settings dropped, or nanoGPT's recipe (config/speedrun_cpu_baseline.py)")
    assert not (tmp_path / "out" / "ckpt.pt").exists()
    # the recipe it names trains with AdamW, and with the quick start's data (the README says so for old torch)
    config, _ = parse_options([str(REPO / "config" / "speedrun_cpu_baseline.py"), "--dataset=python_docs_char"],
                              (TrainConfig, GPTConfig), "train.py", "")
    assert config.optimizer == "adamw"


@needs_fsdp
def test_muon_under_fsdp_on_several_processes_is_refused_before_the_model_is_built(tmp_path, char_data,
                                                                                   monkeypatch):
    """set_up as a process of two under torchrun sees it (no process group is needed to refuse)."""
    monkeypatch.setattr(train_module, "build_model", lambda *args: pytest.fail("the model was built"))
    config, model_config = configs(tmp_path / "out", char_data, **MUON, parallel="fsdp",
                                   gradient_accumulation_steps=2)
    with pytest.raises(UserError, match="optimizer='muon' is not supported with --parallel=fsdp on several "
                                        "processes .* use --parallel=ddp"):
        train_module.set_up(config, model_config, 0, 2, torch.device("cpu"), char_data, {}, frozenset())


# ---- several processes --------------------------------------------------------------------------------------------


@needs_muon
@pytest.mark.slow
def test_ddp_under_muon_equals_one_process(tmp_path, char_data, script_env, ends_its_threads):
    """DDP averages the gradients before the step, so two processes of 2 micro-batches each step as one process
    of 4 does (to the rounding of the sum in another order, through bfloat16 Newton-Schulz)."""
    settings = dict(MUON, gradient_accumulation_steps=4, max_iters=4, lr_decay_iters=4, eval_interval=4)
    torchrun([str(train_module.__file__), *flags(tmp_path / "ddp", char_data, **settings)], script_env, tmp_path)
    train_module.train(*parse_options(flags(tmp_path / "one", char_data, **settings), (TrainConfig, GPTConfig),
                                      prog="train.py", description="", skip=("vocab_size",)))
    ddp, one = load_checkpoint(tmp_path / "ddp" / "ckpt.pt"), load_checkpoint(tmp_path / "one" / "ckpt.pt")
    assert ddp["iter_num"] == one["iter_num"] == 4 and ddp["config"]["optimizer"] == "muon"
    for key, value in one["model"].items():
        torch.testing.assert_close(ddp["model"][key], value, atol=1e-6, rtol=0, msg=key)
