"""The speedruns' optimizer options (training/optimizers.py, training/ema.py): Polar Express, fewer orthogonalisation
iterations, float32 products, AOL's scaling, NorMuon, cautious weight decay, Muon's momentum warmup, an EMA of the
weights.

Each is checked against what does not come from its code: torch.optim.Muon's own step (our step with its
coefficients), the papers' formulas written out here in float64, an SVD's exact polar factor, the weights of a run
without the option averaged here by hand, an uninterrupted run (resume). Off, the default path is torch's Muon and a
checkpoint holds what it held (test_optimizer.py's tests of today's Muon run unchanged).
"""

import math

import pytest
import torch
from helpers import assert_one_line_error, assert_same_state, cli, flags, needs_muon, run, tiny_model

import train as train_module
from training.checkpoint import load_checkpoint
from training.optimizers import (
    NS_COEFFICIENTS,
    MuonVariants,
    build_optimizer,
    check_optimizer_settings,
    muon_momentum_at,
    normuon_normalize,
    orthogonalize,
    set_muon_momentum,
)

MUON = dict(optimizer="muon", muon_learning_rate=0.02)
TORCH_GROUP = dict(ns_coefficients=NS_COEFFICIENTS, ns_steps=5, eps=1e-7)  # torch.optim.Muon's defaults


def matrices(seed: int = 0) -> list[torch.nn.Parameter]:
    """A wide, a tall and a square matrix (torch orthogonalises the wide way round)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(0.2 * torch.randn(shape, generator=g)) for shape in ((24, 40), (40, 24), (32, 32))]


def step_with_gradients(optimizer: torch.optim.Optimizer, params: list, steps: int = 3, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        optimizer.step()


# ---- Newton-Schulz: our step is torch's -----------------------------------------------------------------------------


@needs_muon
@pytest.mark.parametrize("ns_steps", [5, 3])
def test_our_muon_step_with_torchs_coefficients_is_torchs_bit_for_bit(ns_steps):
    """MuonVariants with nothing asked of it runs torch.optim.Muon's update op for op, at torch's 5 iterations and at
    torch's ns_steps=3 (muon_orthogonalize_steps=3): tolerance 0 (seen equal)."""
    ours, theirs = matrices(), matrices()
    settings = dict(lr=0.02, weight_decay=0.1, momentum=0.9)
    step_with_gradients(MuonVariants(ours, **settings, orthogonalization="newton_schulz", normuon=False,
                                     cautious_weight_decay=False, ns_steps=ns_steps), ours)
    step_with_gradients(torch.optim.Muon(theirs, **settings, adjust_lr_fn="original", ns_steps=ns_steps), theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


@needs_muon
@pytest.mark.parametrize("steps", [5, 3])
def test_off_the_default_path_is_torchs_muon(steps):
    """newton_schulz alone is torch's Muon at any muon_orthogonalize_steps (its ns_steps); each option is ours, with
    the same iterations in its group."""
    model = tiny_model()
    optimizer = build_optimizer(model, train_module.TrainConfig(**MUON, muon_orthogonalize_steps=steps), "cpu")
    assert type(optimizer.parts[0]) is torch.optim.Muon
    assert [group["ns_steps"] for group in optimizer.parts[0].param_groups] == [steps]
    for option in (dict(muon_orthogonalize="polar_express"), dict(normuon=True), dict(cautious_weight_decay=True),
                   dict(muon_orthogonalize_scaling="aol")):
        optimizer = build_optimizer(model, train_module.TrainConfig(**MUON, **option, muon_orthogonalize_steps=steps),
                                    "cpu")
        assert type(optimizer.parts[0]) is MuonVariants, option
        assert [group["ns_steps"] for group in optimizer.parts[0].param_groups] == [steps]


# ---- float32 orthogonalisation (muon_orthogonalize_dtype) ------------------------------------------------------------


@pytest.mark.parametrize("method", ["newton_schulz", "polar_express"])
@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (64, 64)])
def test_float32_orthogonalisation_is_the_float64_iteration_where_bfloat16_is_not(method, shape):
    """In float32 the iteration is the one written here in float64 to 1e-5 (relative Frobenius; seen 0.8e-6 to
    2.4e-6); in bfloat16, torch's, it is not (seen 1.2-4.6%): the dtype is the one the products were taken in."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    by_hand = newton_schulz_by_hand(g) if method == "newton_schulz" else polar_express_by_hand(g)
    for dtype, within in ((torch.float32, lambda e: e < 1e-5), (torch.bfloat16, lambda e: e > 1e-3)):
        ours = orthogonalize(g, method, TORCH_GROUP, dtype)
        assert ours.dtype == dtype
        error = ((ours.double() - by_hand).norm() / by_hand.norm()).item()
        assert within(error), (dtype, error)


@needs_muon
def test_a_float32_muon_step_is_torchs_update_within_bfloat16s_rounding():
    """muon_orthogonalize_dtype=float32 is our step, which is torch's Muon op for op but for the dtype of the
    products: after 3 steps the weights differ from torch.optim.Muon's by under 3% of their change (relative
    Frobenius; seen 1.1% on each matrix, bfloat16's rounding of the updates), and are not equal to them."""
    ours, theirs, start = matrices(), matrices(), matrices()
    settings = dict(lr=0.02, weight_decay=0.1, momentum=0.9)
    model = tiny_model()
    optimizer = build_optimizer(model, train_module.TrainConfig(**MUON, muon_orthogonalize_dtype="float32"), "cpu")
    assert type(optimizer.parts[0]) is MuonVariants and optimizer.parts[0].orthogonalize_dtype == torch.float32
    step_with_gradients(MuonVariants(ours, **settings, orthogonalization="newton_schulz", normuon=False,
                                     cautious_weight_decay=False, orthogonalize_dtype=torch.float32), ours)
    step_with_gradients(torch.optim.Muon(theirs, **settings, adjust_lr_fn="original"), theirs)
    for a, b, s in zip(ours, theirs, start, strict=True):
        difference = ((a - b).norm() / (b - s).norm()).item()
        assert 0 < difference < 0.03, difference


# ---- Polar Express: the paper's iteration, nearer the polar factor ---------------------------------------------------

# Amsel, Persson, Musco and Gower 2025 (arXiv:2505.16932): 5 iterations, safety factor 2e-2, cushion 2.
PAPER_COEFFICIENTS = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
                      (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                      (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                      (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                      (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]


def polar_express_by_hand(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """X_0 = G / (1.02 ||G||_F + 1e-6); X_{t+1} = a_t X + b_t (X X^T) X + c_t (X X^T)^2 X for t < steps, in float64."""
    x = g.double() / (g.double().norm() * 1.02 + 1e-6)
    for a, b, c in PAPER_COEFFICIENTS[:steps]:
        gram = x @ x.T
        x = a * x + b * gram @ x + c * gram @ gram @ x
    return x


def newton_schulz_by_hand(g: torch.Tensor) -> torch.Tensor:
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.double() / g.double().norm()
    for _ in range(5):
        gram = x @ x.T
        x = a * x + b * gram @ x + c * gram @ gram @ x
    return x


def polar_factor(g: torch.Tensor) -> torch.Tensor:
    u, _, vh = torch.linalg.svd(g.double(), full_matrices=False)
    return u @ vh


@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (64, 64)])
def test_polar_express_is_the_papers_iteration_and_nearer_the_polar_factor(shape):
    """Ours runs in bfloat16 (as torch's Newton-Schulz does): within 3% of the paper's iteration in float64 (seen
    1.4-1.9%, relative Frobenius). The exact polar factor U V^T: Polar Express's 5 iterations land nearer it than
    Newton-Schulz's 5 (seen 0.086-0.126 against 0.203-0.230 of its norm, relative, on these Gaussian matrices)."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    ours = orthogonalize(g, "polar_express", TORCH_GROUP).double()
    paper = polar_express_by_hand(g)
    assert (ours - paper).norm() / paper.norm() < 0.03
    exact = polar_factor(g)
    express_error = (paper - exact).norm() / exact.norm()
    newton_schulz_error = (newton_schulz_by_hand(g) - exact).norm() / exact.norm()
    assert express_error < 0.7 * newton_schulz_error, (express_error, newton_schulz_error)
    ns = orthogonalize(g, "newton_schulz", TORCH_GROUP).double()
    assert (ours - exact).norm() < (ns - exact).norm()  # and so in bfloat16, as the step computes them


@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (64, 64)])
def test_polar_express_at_3_steps_is_the_papers_first_3_iterations_and_farther_from_the_polar_factor(shape):
    """muon_orthogonalize_steps=3: the first 3 of the paper's iterations (its coefficient triples 1-3, the same
    normalisation), within 3% of them in float64 (seen 1.6-1.9%, relative Frobenius). Stopping there leaves the
    result farther from U V^T than the 5 iterations do (seen 0.50-0.57 of its norm away against 0.09-0.13)."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    ours = orthogonalize(g, "polar_express", {**TORCH_GROUP, "ns_steps": 3}).double()
    paper = polar_express_by_hand(g, steps=3)
    assert (ours - paper).norm() / paper.norm() < 0.03
    exact = polar_factor(g)
    three, five = ((polar_express_by_hand(g, steps) - exact).norm() / exact.norm() for steps in (3, 5))
    assert three > 2 * five, (three, five)
    assert (ours - exact).norm() > (orthogonalize(g, "polar_express", TORCH_GROUP).double() - exact).norm()


# ---- AOL's scaling (muon_orthogonalize_scaling=aol, Turbo-Muon) ------------------------------------------------------


def aol_scaled(g: torch.Tensor) -> torch.Tensor:
    """Prach and Lampert's almost-orthogonal scaling, in float64, the wide way round: X = G (G^T if tall), each row i
    times (sum_j |(X X^T)_ij|)^-1/2."""
    x = g.double().T if g.size(0) > g.size(1) else g.double()
    return x * (x @ x.T).abs().sum(dim=1).rsqrt()[:, None]


def aol_by_hand(g: torch.Tensor, coefficients: list) -> torch.Tensor:
    """Turbo-Muon's iteration in float64: the AOL-scaled X, then X <- a X + b (X X^T) X + c (X X^T)^2 X for each
    triple, every product taken afresh (ours reuses the scaling's X X^T for the first)."""
    x = aol_scaled(g)
    for a, b, c in coefficients:
        gram = x @ x.T
        x = a * x + b * gram @ x + c * gram @ gram @ x
    return x.T if g.size(0) > g.size(1) else x


@pytest.mark.parametrize("method, steps, coefficients", [("newton_schulz", 5, [NS_COEFFICIENTS] * 5),
                                                         ("polar_express", 5, PAPER_COEFFICIENTS),
                                                         ("polar_express", 4, PAPER_COEFFICIENTS[1:])])
@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (64, 64)])
def test_aol_is_turbo_muons_iteration_with_the_last_coefficients(method, steps, coefficients, shape):
    """In float32 the step is the iteration written here in float64 to 1e-5 (relative Frobenius; seen 1.0e-6 to
    4.6e-6), Polar Express taking the paper's last `steps` triples (at 4, triples 2-5); in bfloat16 it is the
    same iteration rounded (seen 1.1-5.4%)."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    by_hand = aol_by_hand(g, coefficients)
    group = {**TORCH_GROUP, "ns_steps": steps}
    for dtype, within in ((torch.float32, lambda e: e < 1e-5), (torch.bfloat16, lambda e: 1e-3 < e < 0.08)):
        ours = orthogonalize(g, method, group, dtype, "aol")
        assert ours.dtype == dtype and ours.shape == g.shape
        error = ((ours.double() - by_hand).norm() / by_hand.norm()).item()
        assert within(error), (dtype, error)


@pytest.mark.parametrize("shape", [(24, 40), (40, 24), (64, 64)])
def test_aol_bounds_the_spectral_norm_by_1_and_leaves_the_singular_values_nearer_it(shape):
    """What the scaling is for: its spectral norm is at most 1 (as the Frobenius norm's is) while its largest and
    smallest singular values sit more than twice as high as the Frobenius-scaled ones (seen 2.3-3.0x, Gaussian);
    so Polar Express's last 4 triples land near U V^T (seen 0.095-0.108 of its norm away) where its first 4 after
    a Frobenius scaling do not (0.37-0.41), and where the first 4 after AOL do not either (0.38-0.39)."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    aol = torch.linalg.svdvals(aol_scaled(g))
    frobenius = torch.linalg.svdvals(g.double() / g.double().norm())
    assert aol.max() <= 1 + 1e-12
    assert aol.max() > 2 * frobenius.max() and aol.min() > 2 * frobenius.min(), (aol, frobenius)
    exact = polar_factor(g)
    last_four = (aol_by_hand(g, PAPER_COEFFICIENTS[1:]) - exact).norm() / exact.norm()
    first_four = (aol_by_hand(g, PAPER_COEFFICIENTS[:4]) - exact).norm() / exact.norm()
    frobenius_four = (polar_express_by_hand(g, steps=4) - exact).norm() / exact.norm()
    assert last_four < 0.15 and first_four > 2 * last_four and frobenius_four > 2 * last_four, (
        last_four, first_four, frobenius_four)


@needs_muon
def test_aol_steps_with_our_muon_and_frobenius_with_torchs():
    """muon_orthogonalize_scaling=aol is our step, the scaling in its orthogonalisation (not torch's, which has
    only the Frobenius norm); the default leaves torch's Muon."""
    model = tiny_model()
    aol = build_optimizer(model, train_module.TrainConfig(**MUON, muon_orthogonalize_scaling="aol"), "cpu").parts[0]
    assert type(aol) is MuonVariants and aol.orthogonalize_scaling == "aol"
    assert type(build_optimizer(model, train_module.TrainConfig(**MUON), "cpu").parts[0]) is torch.optim.Muon
    ours, plain = matrices(), matrices()
    settings = dict(lr=0.02, weight_decay=0.1, momentum=0.9, orthogonalization="newton_schulz", normuon=False,
                    cautious_weight_decay=False)
    step_with_gradients(MuonVariants(ours, **settings, orthogonalize_scaling="aol"), ours)
    step_with_gradients(MuonVariants(plain, **settings), plain)
    assert all(not torch.equal(a, b) for a, b in zip(ours, plain, strict=True))


# ---- NorMuon: the paper's normalisation ------------------------------------------------------------------------------


def test_normuon_is_the_papers_per_neuron_normalisation():
    """Li et al. 2025, Algorithm 1: v <- beta2 v + (1 - beta2) mean_cols(O * O); O_hat = O / (sqrt(v) + eps); then the
    step's size: here O's Frobenius norm in place of the paper's 0.2 sqrt(mn) (Keller Jordan's scaling kept)."""
    g = torch.Generator().manual_seed(4)
    v_mine, v = torch.zeros(6, 1), torch.zeros(6, 1, dtype=torch.float64)
    for _ in range(3):
        o = torch.randn(6, 10, generator=g) * torch.linspace(0.1, 2.0, 6)[:, None]  # rows of very unequal size
        found = normuon_normalize(o, v_mine)
        v = 0.95 * v + 0.05 * (o.double() ** 2).mean(dim=1, keepdim=True)
        o_hat = o.double() / (v.sqrt() + 1e-8)
        expected = o_hat * o.double().norm() / o_hat.norm()
        torch.testing.assert_close(found.double(), expected, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(v_mine.double(), v, rtol=1e-6, atol=0)
    row_norms = found.norm(dim=1)
    assert row_norms.max() / row_norms.min() < 2  # evened out (seen 1.7): the input's rows differ 20-fold


def test_a_normuon_and_cautious_step_is_the_update_written_out():
    """The whole step, 3 times, with the orthogonalisation as ours computes it (checked against torch's above) and
    the rest written here: Nesterov momentum as torch's (buffer lerp), NorMuon's normalisation, the cautious decay
    x <- x - lr wd I(u x >= 0) x (Chen et al. 2025), then x <- x - lr sqrt(max(1, rows/cols)) u."""
    params = matrices()
    lr, wd, mu = 0.02, 0.5, 0.9
    expected = [p.detach().double().clone() for p in params]
    buffers = [torch.zeros_like(p) for p in params]
    moments = [torch.zeros(p.shape[0], 1, dtype=torch.float64) for p in params]
    optimizer = MuonVariants(params, lr=lr, weight_decay=wd, momentum=mu, orthogonalization="polar_express",
                             normuon=True, cautious_weight_decay=True)
    g = torch.Generator().manual_seed(1)
    masked = []
    for _ in range(3):
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=g)
            buffers[i] = buffers[i].lerp(p.grad, 1 - mu)
            o = orthogonalize(p.grad.lerp(buffers[i], mu), "polar_express", TORCH_GROUP).double()
            moments[i] = 0.95 * moments[i] + 0.05 * (o ** 2).mean(dim=1, keepdim=True)
            o_hat = o / (moments[i].sqrt() + 1e-8)
            u = o_hat * o.norm() / o_hat.norm()
            agree = (u * expected[i] >= 0).double()
            masked.append(agree.mean().item())
            expected[i] = expected[i] - lr * wd * agree * expected[i]
            expected[i] = expected[i] - lr * math.sqrt(max(1, p.shape[0] / p.shape[1])) * u
        optimizer.step()
    assert min(masked) > 0.2 and max(masked) < 0.8  # both kinds of coordinate are there
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.detach().double(), e, rtol=0, atol=1e-6)


def test_cautious_decay_leaves_the_weights_the_update_pushes_away_from_zero():
    """With a zero gradient but for one sign, the decay reaches only the coordinates where it agrees."""
    param = torch.nn.Parameter(torch.tensor([[1.0, -1.0], [2.0, -2.0]]))
    optimizer = MuonVariants([param], lr=0.1, weight_decay=0.5, momentum=0.0, orthogonalization="newton_schulz",
                             normuon=False, cautious_weight_decay=True)
    optimizer.step()  # no gradient: nothing moves
    assert torch.equal(param.detach(), torch.tensor([[1.0, -1.0], [2.0, -2.0]]))
    param.grad = torch.tensor([[1.0, 1.0], [1.0, 1.0]])  # rank one: u = the all-(1/2) matrix, times 1
    before = param.detach().clone()
    optimizer.step()
    u = orthogonalize(torch.ones(2, 2), "newton_schulz", TORCH_GROUP).float()
    expected = before - 0.1 * 0.5 * (u * before >= 0) * before - 0.1 * u
    assert torch.equal(param.detach(), expected)
    assert (u > 0).all() and param[0, 0] < before[0, 0] - 0.1 * u[0, 0]  # the positive weights decayed too


# ---- the momentum warmup ---------------------------------------------------------------------------------------------


def test_the_momentum_warmup_is_modded_nanogpts_line():
    config = train_module.TrainConfig(**MUON, muon_momentum=0.95, muon_momentum_warmup=4, muon_momentum_start=0.85)
    found = [muon_momentum_at(step, config) for step in range(7)]
    expected = [0.85 + min(step / 4, 1) * (0.95 - 0.85) for step in range(7)]  # (1 - f) 0.85 + f 0.95
    assert found == pytest.approx(expected, abs=1e-15)
    assert found[:5] == pytest.approx([0.85, 0.875, 0.9, 0.925, 0.95]) and found[5:] == [0.95, 0.95]
    assert muon_momentum_at(0, train_module.TrainConfig(**MUON)) == 0.95  # no warmup: muon_momentum throughout


@needs_muon
def test_the_warmups_momentum_reaches_muons_groups(tmp_path, char_data):
    """The step of iteration i steps with muon_momentum_at(i): after 2 iterations the groups hold step 1's."""
    result = run(tmp_path / "out", char_data, **MUON, max_iters=2, muon_momentum_warmup=4)
    groups = load_checkpoint(tmp_path / "out" / "ckpt.pt")["optimizer"]["param_groups"]
    assert groups[0]["momentum"] == pytest.approx(0.875) and result["iter_num"] == 2
    config = train_module.TrainConfig(**MUON, muon_momentum_warmup=4)
    optimizer = build_optimizer(result["model"], config, "cpu")
    assert optimizer.param_groups[0]["momentum"] == 0.85  # built at step 0's
    set_muon_momentum(optimizer, 3, config)
    assert optimizer.param_groups[0]["momentum"] == pytest.approx(0.925)


# ---- the EMA -----------------------------------------------------------------------------------------------------


def test_the_saved_model_is_the_average_of_the_weights_computed_here(tmp_path, char_data):
    """A run of 5 steps with ema_start=2 saves decay-weighted w3, w4, w5 (the weights after those steps), which a run
    without the EMA, stopped after each step, gives here; its trained weights (w5) stay in ckpt.pt beside it."""
    settings = dict(max_iters=5, lr_decay_iters=5, eval_interval=1000, dropout=0.1)
    weights = {}
    for step in range(1, 6):  # resume is exact (test_optimizer.py, test_train.py): the same weights as straight on
        plain = run(tmp_path / "plain", char_data, **{**settings, "max_iters": step},
                    init_from="resume" if step > 1 else "scratch")
        weights[step] = {name: p.detach().double().clone() for name, p in plain["model"].named_parameters()}
    result = run(tmp_path / "ema", char_data, **settings, ema_decay=0.6, ema_start=2)
    expected = {name: w for name, w in weights[3].items()}
    for step in (4, 5):
        expected = {name: 0.6 * expected[name] + 0.4 * weights[step][name] for name in expected}
    state = load_checkpoint(tmp_path / "ema" / "ckpt.pt")
    names = dict(result["model"].named_parameters()).keys()
    for name in names:
        torch.testing.assert_close(state["model"][name].double(), expected[name], rtol=0, atol=1e-6)
        torch.testing.assert_close(state["ema"][name].double(), expected[name], rtol=0, atol=1e-6)
        assert torch.equal(state["training_weights"][name].double(), weights[5][name]), name
        assert torch.equal(dict(result["model"].named_parameters())[name].detach(), state["model"][name])
    assert max((expected[n] - weights[5][n]).abs().max().item() for n in names) > 1e-3  # the average is not w5
    loss_of_average = train_module.estimate_loss(result["model"], {"val": train_module.load_split(
        char_data, "val", 16)}, train_module.TrainConfig(batch_size=4, eval_iters=2), 16, torch.device("cpu"),
        torch.float32)["val"]
    assert result["evals"][-1]["val_loss"] == pytest.approx(loss_of_average, abs=1e-6)  # the average was evaluated


# ---- resume, bit for bit, under each option ------------------------------------------------------------------------


@pytest.mark.parametrize("option", [dict(muon_orthogonalize="polar_express"), dict(muon_orthogonalize_steps=3),
                                    dict(muon_orthogonalize="polar_express", muon_orthogonalize_steps=3),
                                    dict(normuon=True), dict(cautious_weight_decay=True), dict(muon_momentum_warmup=5),
                                    dict(ema_decay=0.7, ema_start=1), dict(muon_orthogonalize_dtype="float32"),
                                    dict(muon_orthogonalize="polar_express", muon_orthogonalize_steps=4,
                                         muon_orthogonalize_scaling="aol"),
                                    dict(muon_orthogonalize="polar_express", normuon=True, cautious_weight_decay=True,
                                         muon_momentum_warmup=4, ema_decay=0.5, ema_start=2)],
                         ids=["polar_express", "newton_schulz_3_steps", "polar_express_3_steps", "normuon", "cautious",
                              "momentum_warmup", "ema", "float32", "aol", "all"])
@needs_muon
def test_resume_under_each_option_equals_an_uninterrupted_run(tmp_path, char_data, option):
    """3 steps, saved and resumed for 3 more, against 6 straight: the losses, the weights, the optimizer's state (the
    NorMuon moments among them) and the EMA, bit for bit. An EMA run's first part ends with its average as the model;
    the resumed run continues the weights it trained (training_weights)."""
    settings = dict(MUON, max_iters=6, lr_decay_iters=6, warmup_iters=2, eval_interval=3, dropout=0.1, n_layer=2,
                    **option)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 3})
    second = run(tmp_path / "b", char_data, **settings, init_from="resume")
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    a, b = load_checkpoint(tmp_path / "a" / "ckpt.pt"), load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert a.keys() == b.keys()
    for key in ("model", "ema", "training_weights"):
        assert (key in a) == ("ema_decay" in option or key == "model"), key
        if key in a:
            assert_same_state(a[key], b[key])
    for i, state in a["optimizer"]["state"].items():
        assert_same_state(state, b["optimizer"]["state"][i])
    for saved in (a, b):  # the iterations stepped with: the run's, before and after the resume
        assert saved["optimizer"]["param_groups"][0]["ns_steps"] == option.get("muon_orthogonalize_steps", 5)
    if option.get("normuon"):
        assert "normuon_second_moment" in a["optimizer"]["state"][0]


@needs_muon
def test_a_checkpoint_from_before_the_options_resumes_at_their_defaults(tmp_path, char_data, capsys):
    """Its config lacks the new fields: the resumed run is torch's Muon without warmup, EMA or mask."""
    out = tmp_path / "out"
    assert cli(train_module.main, flags(out, char_data, max_iters=2, optimizer="muon"), capsys)[0] == 0
    state = torch.load(out / "ckpt.pt", weights_only=True)
    for name in ("muon_orthogonalize", "muon_orthogonalize_steps", "normuon", "cautious_weight_decay",
                 "muon_momentum_warmup", "muon_momentum_start", "ema_decay", "ema_start", "muon_orthogonalize_dtype",
                 "muon_orthogonalize_scaling"):
        del state["config"][name]
    torch.save(state, out / "ckpt.pt")
    assert cli(train_module.main, flags(out, char_data, max_iters=4, init_from="resume"), capsys)[0] == 0
    resumed = load_checkpoint(out / "ckpt.pt")
    assert resumed["iter_num"] == 4 and resumed["config"]["muon_orthogonalize"] == "newton_schulz"
    assert resumed["config"]["muon_orthogonalize_steps"] == 5
    assert resumed["config"]["muon_orthogonalize_dtype"] == "bfloat16"
    assert resumed["config"]["muon_orthogonalize_scaling"] == "frobenius"
    assert "ema" not in resumed and resumed["config"]["ema_decay"] == 0.0


@needs_muon
def test_a_resume_given_other_iterations_names_them_and_steps_with_them(tmp_path, char_data, capsys):
    """The checkpoint's optimizer groups hold the run's ns_steps, and loading them would put them back: the resumed
    run steps with the iterations given, as its note says (the groups it saves hold them)."""
    out = tmp_path / "out"
    assert cli(train_module.main, flags(out, char_data, max_iters=2, optimizer="muon"), capsys)[0] == 0
    code, _, err = cli(train_module.main, [f"--out_dir={out}", "--init_from=resume", "--max_iters=4",
                                           "--muon_orthogonalize_steps=3", "--progress=False"], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        "note: resuming with muon_orthogonalize_steps=3 (the run's: 5); every other setting is the run's"]
    resumed = load_checkpoint(out / "ckpt.pt")
    assert resumed["config"]["muon_orthogonalize_steps"] == 3 and resumed["iter_num"] == 4
    assert resumed["optimizer"]["param_groups"][0]["ns_steps"] == 3


# ---- refusals -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, fragments", [
    (dict(normuon=True), ["normuon is a setting of optimizer=muon, and this run's optimizer is adamw", "drop it"]),
    (dict(cautious_weight_decay=True), ["cautious_weight_decay is a setting of optimizer=muon"]),
    (dict(muon_orthogonalize="polar_express"), ["muon_orthogonalize is a setting of optimizer=muon"]),
    (dict(optimizer="muon", muon_orthogonalize="svd"), ["muon_orthogonalize='svd' must be one of newton_schulz, "
                                                        "polar_express"]),
    (dict(muon_orthogonalize_steps=3), ["muon_orthogonalize_steps is a setting of optimizer=muon, and this run's "
                                        "optimizer is adamw", "it would do nothing"]),
    (dict(optimizer="muon", muon_orthogonalize_steps=0), ["muon_orthogonalize_steps=0 must be >= 1"]),
    (dict(muon_orthogonalize_dtype="float32"), ["muon_orthogonalize_dtype is a setting of optimizer=muon"]),
    (dict(optimizer="muon", muon_orthogonalize_dtype="float16"), ["muon_orthogonalize_dtype='float16' must be one "
                                                                  "of bfloat16, float32"]),
    (dict(muon_orthogonalize_scaling="aol"), ["muon_orthogonalize_scaling is a setting of optimizer=muon"]),
    (dict(optimizer="muon", muon_orthogonalize_scaling="spectral"), ["muon_orthogonalize_scaling='spectral' must be "
                                                                     "one of frobenius, aol"]),
    (dict(optimizer="muon", muon_orthogonalize="polar_express", muon_orthogonalize_steps=6),
     ["muon_orthogonalize_steps=6 is more than the 5 iterations polar_express has coefficients for",
      "give muon_orthogonalize_steps <= 5, or muon_orthogonalize=newton_schulz"]),
    (dict(optimizer="muon", muon_momentum_start=0.8), ["muon_momentum_start is a setting of muon_momentum_warmup, "
                                                       "and this run's is 0"]),
    (dict(optimizer="muon", muon_momentum_warmup=-1), ["muon_momentum_warmup=-1 must be >= 0"]),
    (dict(optimizer="muon", muon_momentum_warmup=5, muon_momentum_start=1.0),
     ["muon_momentum_start=1.0 must be in [0, 1)"]),
    (dict(optimizer="muon", cautious_weight_decay=True, weight_decay=0.0),
     ["cautious_weight_decay masks the weight decay, and this run's weight_decay is 0"]),
    (dict(ema_start=2), ["ema_start is a setting of ema_decay, and this run's is 0"]),
    (dict(ema_decay=1.0), ["ema_decay=1.0 must be in [0, 1)"]),
    (dict(ema_decay=0.9, ema_start=4), ["ema_start=4 must be in [0, max_iters=4)"]),
])
def test_bad_or_idle_option_settings_are_one_line_before_anything_is_written(tmp_path, char_data, capsys, given,
                                                                              fragments):
    code, out, err = cli(train_module.main, flags(tmp_path / "out", char_data, **given), capsys)
    assert_one_line_error(code, out, err, *fragments)
    assert not (tmp_path / "out").exists()


def test_newton_schulz_takes_more_iterations_than_polar_express_has_coefficients_for():
    check_optimizer_settings(train_module.TrainConfig(**MUON, muon_orthogonalize_steps=8))  # torch's ns_steps: any
