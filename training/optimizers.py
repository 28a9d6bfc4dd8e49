"""The optimizer a run trains with (--optimizer): AdamW for every parameter (nanoGPT's, the default), or Muon for the
matrices inside the blocks with AdamW for the rest, as one optimizer.

Muon (torch.optim.Muon; Keller Jordan, 2024) replaces a matrix's momentum by the nearest semi-orthogonal matrix
(5 Newton-Schulz steps) before stepping: every direction of the update moves alike. That suits the linear maps of
the blocks (attention c_attn and c_proj, MLP c_fc and c_proj), not a lookup table (the token table and the head
tied to it, a position table) nor a vector (LayerNorm gains, biases): those stay AdamW's, as torch's docstring and
modded-nanogpt say. Each part keeps its own base rate, and the schedule (schedule.py) scales both by one factor.

The speedruns' newer Muon pieces are options, off by default (torch's Muon then steps, bit for bit as before):
Polar Express's per-iteration coefficients in place of Newton-Schulz's fixed ones, NorMuon's per-neuron
normalisation, cautious weight decay (MuonVariants, our own Muon step, used when one of them is on), and a momentum
warmup (muon_momentum_at, under either step). muon_orthogonalize_steps sets the iterations of either step (torch's
ns_steps; 5, the default, is today's step), muon_orthogonalize_dtype the dtype its matrix products take (torch's
bfloat16, the default; float32 for a CPU without bfloat16 arithmetic, where bfloat16 products are emulated), and
muon_orthogonalize_scaling how its input is scaled first (torch's division by the Frobenius norm, the default; or
Turbo-Muon's AOL scaling, which starts the iteration nearer its end so that one fewer iteration may do).
"""

import math
import typing

import torch
from torch import nn

from errors import UserError
from model import GPT

OPTIMIZERS = ("adamw", "muon")
ORTHOGONALIZATIONS = ("newton_schulz", "polar_express")
ORTHOGONALIZE_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}  # the first is torch's Muon's
ORTHOGONALIZE_SCALINGS = ("frobenius", "aol")  # the first is torch's Muon's
MUON_OPTIONS = ("normuon", "cautious_weight_decay")  # Muon's settings not named muon_*
MUON_TORCH = "2.9"  # torch.optim.Muon arrived in torch 2.9 (pytorch/pytorch#160213, merged August 2025)
# Keller Jordan's scaling, the one his Muon and modded-nanogpt use with a rate of 0.02: the step is multiplied by
# sqrt(max(1, rows / cols)). torch's other choice, "match_rms_adamw" (0.2 * sqrt(max(rows, cols))), makes the rate
# comparable to AdamW's: with it 0.02 would step like AdamW at 0.02, 33 times learning_rate's default.
MUON_LR_ADJUSTMENT = "original"


class OptimizerSettings(typing.Protocol):
    """What building the optimizer and setting its rates read (train.py's TrainConfig has these fields)."""
    optimizer: str  # one of OPTIMIZERS
    learning_rate: float  # AdamW's peak rate
    head_learning_rate: float  # an untied head's own peak rate; 0: learning_rate
    weight_decay: float
    beta1: float
    beta2: float
    muon_learning_rate: float  # Muon's peak rate
    muon_momentum: float
    muon_orthogonalize: str  # one of ORTHOGONALIZATIONS
    muon_orthogonalize_steps: int  # its iterations: torch's ns_steps; polar_express's first N coefficient triples
    muon_orthogonalize_dtype: str  # a key of ORTHOGONALIZE_DTYPES: the dtype of its matrix products
    muon_orthogonalize_scaling: str  # one of ORTHOGONALIZE_SCALINGS: how its input is scaled before the iterations
    normuon: bool
    cautious_weight_decay: bool
    muon_momentum_warmup: int  # steps
    muon_momentum_start: float
    decay_lr: bool  # the schedule's (schedule.py): with min_lr, the highest rate a step can take
    min_lr: float


def check_optimizer_settings(config: OptimizerSettings) -> None:
    """A ValueError naming the setting unless the optimizer's settings make sense."""
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={config.optimizer!r} must be one of {', '.join(OPTIMIZERS)}")
    if not (math.isfinite(config.muon_learning_rate) and config.muon_learning_rate > 0):
        raise ValueError(f"muon_learning_rate={config.muon_learning_rate} must be a finite number > 0 "
                         "(Keller Jordan's Muon: 0.02)")
    if not (math.isfinite(config.head_learning_rate) and config.head_learning_rate >= 0):
        raise ValueError(f"head_learning_rate={config.head_learning_rate} must be a finite number >= 0 (0: the "
                         "head trains at learning_rate)")
    if not 0.0 <= config.muon_momentum < 1.0:
        raise ValueError(f"muon_momentum={config.muon_momentum} must be in [0, 1) (Muon's Nesterov momentum; "
                         "Keller Jordan's Muon: 0.95)")
    if config.muon_orthogonalize not in ORTHOGONALIZATIONS:
        raise ValueError(f"muon_orthogonalize={config.muon_orthogonalize!r} must be one of "
                         f"{', '.join(ORTHOGONALIZATIONS)}")
    if config.muon_orthogonalize_steps < 1:
        raise ValueError(f"muon_orthogonalize_steps={config.muon_orthogonalize_steps} must be >= 1 (the "
                         f"orthogonalisation's iterations; Keller Jordan's Muon: {NS_STEPS})")
    if config.muon_orthogonalize_dtype not in ORTHOGONALIZE_DTYPES:
        raise ValueError(f"muon_orthogonalize_dtype={config.muon_orthogonalize_dtype!r} must be one of "
                         f"{', '.join(ORTHOGONALIZE_DTYPES)}")
    if config.muon_orthogonalize_scaling not in ORTHOGONALIZE_SCALINGS:
        raise ValueError(f"muon_orthogonalize_scaling={config.muon_orthogonalize_scaling!r} must be one of "
                         f"{', '.join(ORTHOGONALIZE_SCALINGS)}")
    if config.muon_orthogonalize == "polar_express" and \
            config.muon_orthogonalize_steps > len(POLAR_EXPRESS_COEFFICIENTS):
        raise ValueError(f"muon_orthogonalize_steps={config.muon_orthogonalize_steps} is more than the "
                         f"{len(POLAR_EXPRESS_COEFFICIENTS)} iterations polar_express has coefficients for (the "
                         f"paper's, one triple an iteration); give muon_orthogonalize_steps <= "
                         f"{len(POLAR_EXPRESS_COEFFICIENTS)}, or muon_orthogonalize=newton_schulz")
    if config.muon_momentum_warmup < 0:
        raise ValueError(f"muon_momentum_warmup={config.muon_momentum_warmup} must be >= 0 (0: no warmup)")
    if not 0.0 <= config.muon_momentum_start < 1.0:
        raise ValueError(f"muon_momentum_start={config.muon_momentum_start} must be in [0, 1) (modded-nanogpt: 0.85)")
    check_decay_factor(config)


def check_decay_factor(config: OptimizerSettings) -> None:
    """Both parts decay a matrix as torch does, weights x (1 - rate x weight_decay) each step: at a factor <= 0 every
    step flips the matrices' sign (or zeroes them), whatever the gradients say. Refused for the highest rate of the
    schedule, of each part that decays (AdamW always, Muon with optimizer=muon)."""
    top = max(config.learning_rate, config.min_lr) if config.decay_lr else config.learning_rate
    rates = {"learning_rate": top}  # AdamW's
    if config.optimizer == "muon":  # Muon's rate follows the schedule by the same factor (set_learning_rates)
        rates["muon_learning_rate"] = config.muon_learning_rate * top / config.learning_rate
    if config.head_learning_rate:  # an untied head's own AdamW rate, scheduled alike
        rates["head_learning_rate"] = config.head_learning_rate * top / config.learning_rate
    for name, rate in rates.items():
        if rate * config.weight_decay >= 1:
            part = {"muon_learning_rate": "Muon", "head_learning_rate": "the head"}.get(name, "AdamW")
            raise ValueError(f"weight_decay={config.weight_decay:g} at {part}'s peak rate {rate:g} ({name}) makes the "
                             f"decay factor 1 - rate x weight_decay = {1 - rate * config.weight_decay:g}, not > 0: "
                             f"every step would flip or zero the matrices; give weight_decay < 1/{rate:g} = "
                             f"{1 / rate:g} (nanoGPT: 0.1)")


def check_optimizer_here(optimizer: str, sharded: bool) -> None:
    """Refuse, before the model is built, a Muon run that this torch or this parallelism cannot do."""
    if optimizer != "muon":
        return
    if not hasattr(torch.optim, "Muon"):
        raise UserError(f"optimizer='muon' needs torch {MUON_TORCH} or newer (torch.optim.Muon), but this is "
                        f"torch {torch.__version__}; upgrade torch, or train with AdamW: --optimizer=adamw with "
                        "Muon's settings dropped, or nanoGPT's recipe (config/speedrun_cpu_baseline.py)")
    if sharded:
        # Muon orthogonalises each whole matrix; under FSDP each process holds a slice of it (a DTensor), and
        # neither that nor the optimizer state gathered for ckpt.pt has been tried here.
        raise UserError("optimizer='muon' is not supported with --parallel=fsdp on several processes (each holds "
                        "a slice of every matrix; Muon needs them whole); use --parallel=ddp, or --optimizer=adamw")


def muon_matrices(model: GPT) -> list[nn.Parameter]:
    """The weights Muon trains: those of the nn.Linear layers inside the blocks, in the model's order."""
    return [module.weight for module in model.blocks.modules() if isinstance(module, nn.Linear)]


# torch.optim.Muon's defaults (Keller Jordan's): the group settings MuonVariants shares with it, so that a checkpoint of
# either resumes in the other.
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7
# Polar Express (Amsel, Persson, Musco and Gower 2025, "The Polar Express: Optimal Matrix Sign Methods and Their
# Application to the Muon Algorithm", arXiv:2505.16932): iteration t applies its own odd quintic a x + b x^3 + c x^5
# to the singular values, each the best for the interval the ones before it leave, where Newton-Schulz repeats one.
# The paper's coefficients for 5 iterations, safety factor 2e-2 and cushion 2 (those nanochat and modded-nanogpt use;
# fewer iterations take the first ones);
# the input is divided by (1 + the safety factor) times its Frobenius norm, which bounds its spectral norm by 1/1.02.
POLAR_EXPRESS_COEFFICIENTS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
POLAR_EXPRESS_SAFETY = 2e-2
POLAR_EXPRESS_EPS = 1e-6
NORMUON_BETA2 = 0.95  # NorMuon's second-moment decay (Li et al. 2025's default; nanochat's)
NORMUON_EPS = 1e-8


def orthogonalize(update: torch.Tensor, method: str, group: dict, dtype: torch.dtype = torch.bfloat16,
                  scaling: str = "frobenius") -> torch.Tensor:
    """The update's nearest semi-orthogonal matrix, approximately, in dtype (bfloat16: as torch computes it):
    scaled, then X <- aX + (bA + cA^2)X with A = X X^T, the wide way round. newton_schulz is torch.optim.Muon's
    _zeropower_via_newtonschulz op for op (group's ns_coefficients, ns_steps times, X / max(||X||_F, eps)), so that
    this step in bfloat16 equals torch's; polar_express takes each iteration's own coefficients, the first ns_steps
    of them.

    scaling="aol" (Turbo-Muon: Boissin, Massena, Mamalet and Serrurier 2025, arXiv:2512.04632, after Prach and
    Lampert's almost-orthogonal layers, arXiv:2208.03160) scales each row i of X by s_i = (sum_j |A_ij|)^-1/2 in
    place of the one Frobenius norm: that bounds the spectral norm by 1 as the norm does, but leaves the singular
    values nearer 1, so the iteration starts nearer its end. A is the first iteration's own product, rescaled
    (s_i s_j A_ij), so the scaling costs no matrix product; polar_express then takes its last ns_steps coefficient
    triples, as Turbo-Muon does: the first is made for the tiny singular values a Frobenius scaling leaves."""
    x = update.to(dtype)
    tall = update.size(0) > update.size(1)
    x = x.T if tall else x
    steps = group["ns_steps"]
    if method == "polar_express":
        coefficients = POLAR_EXPRESS_COEFFICIENTS[-steps:] if scaling == "aol" else POLAR_EXPRESS_COEFFICIENTS[:steps]
    else:
        coefficients = (group["ns_coefficients"],) * steps
    if scaling == "aol":
        gram = x @ x.T
        row_scale = gram.abs().sum(dim=1).clamp(min=group["eps"]).rsqrt()
        x = x * row_scale[:, None]
        gram = gram * row_scale[:, None] * row_scale[None, :]
    elif method == "polar_express":
        x = x / (x.norm() * (1 + POLAR_EXPRESS_SAFETY) + POLAR_EXPRESS_EPS)
    else:
        x = x / x.norm().clamp(min=group["eps"])
    for i, (a, b, c) in enumerate(coefficients):
        if i > 0 or scaling != "aol":
            gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def normuon_normalize(update: torch.Tensor, second_moment: torch.Tensor) -> torch.Tensor:
    """NorMuon (Li, Liu, Liang, Chen and Zhao 2025, "NorMuon: Making Muon more efficient and scalable",
    arXiv:2510.05491, Algorithm 1) on an orthogonalised update O (rows x cols; a row is an output neuron's weights):
    v <- beta2 v + (1 - beta2) mean_j O_ij^2 (second_moment, rows x 1, in place), O_hat = O / (sqrt(v) + eps). The paper
    then steps by 0.2 sqrt(rows x cols) / ||O_hat||_F times O_hat, AdamW's RMS (Moonshot's scaling); this Muon keeps
    Keller Jordan's, so O_hat takes O's Frobenius norm instead, as nanochat and modded-nanogpt do: muon_learning_rate
    steps as far as it did, each neuron's share evened out."""
    update = update.float()
    second_moment.lerp_(update.square().mean(dim=1, keepdim=True), 1 - NORMUON_BETA2)
    normalized = update / (second_moment.sqrt() + NORMUON_EPS)
    return normalized * (update.norm() / normalized.norm().clamp(min=torch.finfo(torch.float32).tiny))


class MuonVariants(torch.optim.Optimizer):
    """Muon's step written here for what torch.optim.Muon does not take (another orthogonalisation, a normalisation
    after it, a mask on its decay): torch's update op for op otherwise, with its group settings and its
    momentum_buffer, so that the default path stays torch's own and a checkpoint of one resumes in the other.

    orthogonalization: one of ORTHOGONALIZATIONS, ns_steps iterations of it (the group's, as torch's), its products
    in orthogonalize_dtype (torch's: bfloat16), its input scaled by orthogonalize_scaling (torch's: frobenius). normuon:
    normuon_normalize after it. cautious_weight_decay: decay a weight only where it and the update agree in sign
    (Chen, Li, Liang, Su, Xie, Pierse, Liang, Lao and Liu 2025, "Cautious Weight Decay", arXiv:2510.12402:
    x <- x - lr (u + wd I(u x >= 0) x); nanochat and modded-nanogpt): there both move it towards zero, and decay
    elsewhere would pull against the step."""

    def __init__(self, params: list[nn.Parameter], *, lr: float, weight_decay: float, momentum: float,
                 orthogonalization: str, normuon: bool, cautious_weight_decay: bool, ns_steps: int = NS_STEPS,
                 orthogonalize_dtype: torch.dtype = torch.bfloat16, orthogonalize_scaling: str = "frobenius") -> None:
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=True,
                                      ns_coefficients=NS_COEFFICIENTS, eps=NS_EPS, ns_steps=ns_steps,
                                      adjust_lr_fn=MUON_LR_ADJUSTMENT))
        self.orthogonalization, self.normuon, self.cautious_weight_decay = (orthogonalization, normuon,
                                                                           cautious_weight_decay)
        self.orthogonalize_dtype, self.orthogonalize_scaling = orthogonalize_dtype, orthogonalize_scaling

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, weight_decay, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param.grad, memory_format=torch.preserve_format)
                buffer = state["momentum_buffer"]
                buffer.lerp_(param.grad, 1 - momentum)
                update = orthogonalize(param.grad.lerp(buffer, momentum), self.orthogonalization, group,  # Nesterov
                                       self.orthogonalize_dtype, self.orthogonalize_scaling)
                if self.normuon:
                    if "normuon_second_moment" not in state:
                        state["normuon_second_moment"] = torch.zeros(param.shape[0], 1, dtype=torch.float32,
                                                                     device=param.device)
                    update = normuon_normalize(update, state["normuon_second_moment"])
                if self.cautious_weight_decay:
                    param.sub_(param * (update * param >= 0) * (lr * weight_decay))
                else:
                    param.mul_(1 - lr * weight_decay)
                param.add_(update, alpha=-lr * math.sqrt(max(1, param.shape[0] / param.shape[1])))  # "original"


class MuonAdamW(torch.optim.Optimizer):
    """torch's Muon and AdamW as one optimizer, so that the loop, the grad scaler, clipping, the step hooks and
    ckpt.pt see one: its param_groups are Muon's then AdamW's (the same dicts), its state theirs (one dict, shared),
    and its state_dict one torch state dict numbering the parameters in that order."""

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.AdamW) -> None:
        self.parts = (muon, adamw)
        super().__init__([group for part in self.parts for group in part.param_groups], {})
        self.share()

    def share(self) -> None:
        """Point the parts at this optimizer's groups and state (load_state_dict replaces both with new ones)."""
        groups = iter(self.param_groups)
        for part in self.parts:
            part.param_groups = [next(groups) for _ in part.param_groups]
            part.state = self.state

    def step(self) -> None:
        """One step of each part (no closure: nothing here evaluates the loss again)."""
        for part in self.parts:
            part.step()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load, then the parts pointed at the groups and the state it made."""
        super().load_state_dict(state_dict)
        self.share()


def build_optimizer(model: GPT, config: OptimizerSettings, device_type: str) -> torch.optim.Optimizer:
    """The optimizer of config.optimizer for model (after FSDP has sharded it: it must hold the shards). AdamW's
    groups are configure_optimizers' (decay on matrices, none on vectors); Muon decays its matrices by the same
    weight_decay, each part as torch applies it: the weights times (1 - rate x weight_decay) every step."""
    betas = (config.beta1, config.beta2)
    if config.optimizer == "adamw":
        return model.configure_optimizers(config.weight_decay, config.learning_rate, betas, device_type,
                                          head_learning_rate=config.head_learning_rate)
    matrices = muon_matrices(model)
    taken = {id(p) for p in matrices}
    adamw = model.configure_optimizers(config.weight_decay, config.learning_rate, betas, device_type,
                                       params=[p for p in model.parameters() if id(p) not in taken],
                                       head_learning_rate=config.head_learning_rate)
    momentum = muon_momentum_at(0, config)
    if config.muon_orthogonalize == "newton_schulz" and not config.normuon and not config.cautious_weight_decay \
            and config.muon_orthogonalize_dtype == "bfloat16" and config.muon_orthogonalize_scaling == "frobenius":
        muon = torch.optim.Muon(matrices, lr=config.muon_learning_rate, weight_decay=config.weight_decay,
                                momentum=momentum, ns_steps=config.muon_orthogonalize_steps,
                                adjust_lr_fn=MUON_LR_ADJUSTMENT)
    else:
        muon = MuonVariants(matrices, lr=config.muon_learning_rate, weight_decay=config.weight_decay,
                            momentum=momentum, orthogonalization=config.muon_orthogonalize, normuon=config.normuon,
                            cautious_weight_decay=config.cautious_weight_decay,
                            ns_steps=config.muon_orthogonalize_steps,
                            orthogonalize_dtype=ORTHOGONALIZE_DTYPES[config.muon_orthogonalize_dtype],
                            orthogonalize_scaling=config.muon_orthogonalize_scaling)
    return MuonAdamW(muon, adamw)


def set_learning_rates(optimizer: torch.optim.Optimizer, lr: float, config: OptimizerSettings) -> None:
    """This step's rates from the schedule's lr: AdamW's groups at lr, Muon's at muon_learning_rate scaled by the
    same factor, lr / learning_rate (exactly muon_learning_rate at the peak). From the settings, not the groups, so
    that a resumed run takes the rates it is given, as it always has for learning_rate."""
    for group in optimizer.param_groups:
        group["lr"] = lr
        if group.get("name") == "head":  # the untied head's own rate, scaled by the same factor
            group["lr"] = config.head_learning_rate * (lr / config.learning_rate)
    if isinstance(optimizer, MuonAdamW):
        for group in optimizer.parts[0].param_groups:
            group["lr"] = config.muon_learning_rate * (lr / config.learning_rate)


def muon_momentum_at(step: int, config: OptimizerSettings) -> float:
    """Muon's momentum at step: modded-nanogpt's warmup, linear from muon_momentum_start at step 0 to muon_momentum
    at step muon_momentum_warmup, muon_momentum from there (muon_momentum throughout when the warmup is 0). A low
    momentum early follows the gradients of a model that still changes fast."""
    if step >= config.muon_momentum_warmup:
        return config.muon_momentum
    fraction = step / config.muon_momentum_warmup
    return config.muon_momentum_start + fraction * (config.muon_momentum - config.muon_momentum_start)


def set_muon_momentum(optimizer: torch.optim.Optimizer, step: int, config: OptimizerSettings) -> None:
    """This step's momentum for Muon's groups (muon_momentum_at); from the step, so that a resumed run continues the
    warmup where it was."""
    if isinstance(optimizer, MuonAdamW) and config.muon_momentum_warmup:
        for group in optimizer.parts[0].param_groups:
            group["momentum"] = muon_momentum_at(step, config)
