"""The optimizer a run trains with (--optimizer): AdamW for every parameter (nanoGPT's, the default), or Muon for the
matrices inside the blocks with AdamW for the rest, as one optimizer.

Muon (torch.optim.Muon; Keller Jordan, 2024) replaces a matrix's momentum by the nearest semi-orthogonal matrix
(5 Newton-Schulz steps) before stepping: every direction of the update moves alike. That suits the linear maps of
the blocks (attention c_attn and c_proj, MLP c_fc and c_proj), not a lookup table (the token table and the head
tied to it, a position table) nor a vector (LayerNorm gains, biases): those stay AdamW's, as torch's docstring and
modded-nanogpt say. Each part keeps its own base rate, and the schedule (schedule.py) scales both by one factor.
"""

import math
import typing

import torch
from torch import nn

from errors import UserError
from model import GPT

OPTIMIZERS = ("adamw", "muon")
MUON_TORCH = "2.9"  # torch.optim.Muon arrived in torch 2.9 (pytorch/pytorch#160213, merged August 2025)
# Keller Jordan's scaling, the one his Muon and modded-nanogpt use with a rate of 0.02: the step is multiplied by
# sqrt(max(1, rows / cols)). torch's other choice, "match_rms_adamw" (0.2 * sqrt(max(rows, cols))), makes the rate
# comparable to AdamW's: with it 0.02 would step like AdamW at 0.02, 33 times learning_rate's default.
MUON_LR_ADJUSTMENT = "original"


class OptimizerSettings(typing.Protocol):
    """What building the optimizer and setting its rates read (train.py's TrainConfig has these fields)."""
    optimizer: str  # one of OPTIMIZERS
    learning_rate: float  # AdamW's peak rate
    weight_decay: float
    beta1: float
    beta2: float
    muon_learning_rate: float  # Muon's peak rate
    muon_momentum: float
    decay_lr: bool  # the schedule's (schedule.py): with min_lr, the highest rate a step can take
    min_lr: float


def check_optimizer_settings(config: OptimizerSettings) -> None:
    """A ValueError naming the setting unless the optimizer's settings make sense."""
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={config.optimizer!r} must be one of {', '.join(OPTIMIZERS)}")
    if not (math.isfinite(config.muon_learning_rate) and config.muon_learning_rate > 0):
        raise ValueError(f"muon_learning_rate={config.muon_learning_rate} must be a finite number > 0 "
                         "(Keller Jordan's Muon: 0.02)")
    if not 0.0 <= config.muon_momentum < 1.0:
        raise ValueError(f"muon_momentum={config.muon_momentum} must be in [0, 1) (Muon's Nesterov momentum; "
                         "Keller Jordan's Muon: 0.95)")
    check_decay_factor(config)


def check_decay_factor(config: OptimizerSettings) -> None:
    """Both parts decay a matrix as torch does, weights x (1 - rate x weight_decay) each step: at a factor <= 0 every
    step flips the matrices' sign (or zeroes them), whatever the gradients say. Refused for the highest rate of the
    schedule, of each part that decays (AdamW always, Muon with optimizer=muon)."""
    top = max(config.learning_rate, config.min_lr) if config.decay_lr else config.learning_rate
    rates = {"learning_rate": top}  # AdamW's
    if config.optimizer == "muon":  # Muon's rate follows the schedule by the same factor (set_learning_rates)
        rates["muon_learning_rate"] = config.muon_learning_rate * top / config.learning_rate
    for name, rate in rates.items():
        if rate * config.weight_decay >= 1:
            part = "Muon" if name == "muon_learning_rate" else "AdamW"
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
                        f"torch {torch.__version__}; upgrade torch, or use --optimizer=adamw")
    if sharded:
        # Muon orthogonalises each whole matrix; under FSDP each process holds a slice of it (a DTensor), and
        # neither that nor the optimizer state gathered for ckpt.pt has been tried here.
        raise UserError("optimizer='muon' is not supported with --parallel=fsdp on several processes (each holds "
                        "a slice of every matrix; Muon needs them whole); use --parallel=ddp, or --optimizer=adamw")


def muon_matrices(model: GPT) -> list[nn.Parameter]:
    """The weights Muon trains: those of the nn.Linear layers inside the blocks, in the model's order."""
    return [module.weight for module in model.blocks.modules() if isinstance(module, nn.Linear)]


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
        super().load_state_dict(state_dict)
        self.share()


def build_optimizer(model: GPT, config: OptimizerSettings, device_type: str) -> torch.optim.Optimizer:
    """The optimizer of config.optimizer for model (after FSDP has sharded it: it must hold the shards). AdamW's
    groups are configure_optimizers' (decay on matrices, none on vectors); Muon decays its matrices by the same
    weight_decay, each part as torch applies it: the weights times (1 - rate x weight_decay) every step."""
    betas = (config.beta1, config.beta2)
    if config.optimizer == "adamw":
        return model.configure_optimizers(config.weight_decay, config.learning_rate, betas, device_type)
    matrices = muon_matrices(model)
    taken = {id(p) for p in matrices}
    adamw = model.configure_optimizers(config.weight_decay, config.learning_rate, betas, device_type,
                                       params=[p for p in model.parameters() if id(p) not in taken])
    muon = torch.optim.Muon(matrices, lr=config.muon_learning_rate, weight_decay=config.weight_decay,
                            momentum=config.muon_momentum, adjust_lr_fn=MUON_LR_ADJUSTMENT)
    return MuonAdamW(muon, adamw)


def set_learning_rates(optimizer: torch.optim.Optimizer, lr: float, config: OptimizerSettings) -> None:
    """This step's rates from the schedule's lr: AdamW's groups at lr, Muon's at muon_learning_rate scaled by the
    same factor, lr / learning_rate (exactly muon_learning_rate at the peak). From the settings, not the groups, so
    that a resumed run takes the rates it is given, as it always has for learning_rate."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    if isinstance(optimizer, MuonAdamW):
        for group in optimizer.parts[0].param_groups:
            group["lr"] = config.muon_learning_rate * (lr / config.learning_rate)
