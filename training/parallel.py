"""Several processes under torchrun: DDP or FSDP2, and the one checkpoint format both write.

DDP keeps the whole model, its gradients and AdamW's state on every process and averages the gradients. FSDP
(torch.distributed.fsdp.fully_shard on a device mesh) keeps 1/N of each parameter, gradient and optimizer state
on each process: every Block is one group, all-gathered just before it runs and freed after; the root group holds
the rest, the token table and the head it is tied to among it. Checkpoints hold full state dicts in both cases,
as a single process writes them, so a single process, DDP, FSDP on any number of processes and sample.py all load
what any of them saved.
"""

import contextlib
import gc
import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from errors import UserError

FSDP_TORCH = "2.6"  # fully_shard and its policy are public in torch.distributed.fsdp from this release on
try:  # only --parallel=fsdp needs these: on an older torch the rest of the repository runs without them
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
except ImportError:
    FSDPModule = None

PARALLELS = ("ddp", "fsdp")
# Gathered whole, one tensor at a time, onto the CPU of rank 0 (the other ranks get empty dicts).
FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True) if FSDPModule is not None else None
# The device meshes shard_model made, for end_processes (weak: the meshes live as long as torch keeps them).
MESHES = weakref.WeakSet()


def check_sharding(parallel: str, world_size: int, dtype: torch.dtype) -> None:
    """Refuse, before the model is built, an FSDP run that this torch or this dtype cannot do."""
    if world_size == 1 or parallel != "fsdp":
        return
    if FSDPModule is None:
        raise UserError(f"parallel='fsdp' needs torch {FSDP_TORCH} or newer (torch.distributed.fsdp.fully_shard), "
                        f"but this is torch {torch.__version__}; upgrade torch, or use --parallel=ddp")
    if dtype == torch.float16:
        raise UserError("parallel='fsdp' trains in float32 or bfloat16, not float16 (its gradient scaler does not "
                        "know shards); use --dtype=bfloat16, or --parallel=ddp")


def shard_model(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """FSDP2 in place: each Block its own group, then the root. Build the optimizer after this: it must hold
    the sharded parameters."""
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    MESHES.add(mesh)
    # bf16: weights all-gathered and multiplied in bf16, gradients reduced in fp32; the sharded master stays fp32.
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if dtype == torch.bfloat16 else MixedPrecisionPolicy()
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def wrap_for_training(model: nn.Module, parallel: str, world_size: int, device: torch.device) -> nn.Module:
    """What the training step calls: DDP around the (compiled) model; FSDP and one process need no wrapper."""
    if world_size == 1 or parallel == "fsdp":
        return model
    # gradient_as_bucket_view: the gradients live in DDP's buckets instead of beside them (4 bytes/parameter less)
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   gradient_as_bucket_view=True)


def end_processes() -> None:
    """Destroy the process group so that its gloo threads stop now, not at interpreter exit. Call it once nothing
    refers to DDP's wrapper or an FSDP-sharded model any more.

    dist.destroy_process_group() alone leaves the group, and its threads, alive while anything else holds it:
    DDP's reducer, FSDP's modules, and the device mesh, which DTensor's sharding caches keep for good. A gloo
    thread frees each finished collective's tensors, and that takes the GIL when Python owns them; so when the
    group outlives training, a thread still freeing the last collective either deadlocks (DDP's reducer, freed
    with the GIL held, joins that thread) or aborts the process at exit ("terminate called without an active
    exception": Python ends a thread that asks for the GIL during shutdown, here inside a C++ destructor).
    Freeing the holders (gc.collect(): FSDP's modules live in reference cycles) and emptying the meshes' group
    registries lets destroy_process_group() drop the group's last reference, whose destructor releases the GIL
    while it joins the threads.
    """
    gc.collect()
    # DeviceMesh._pg_registry is private, and no public call releases a mesh's groups (torch 2.13: DeviceMesh has
    # no close(); DeviceMesh.from_group registers the group it is given the same way; fully_shard without a mesh
    # makes one we could not reach). So it stays, behind getattr: a torch without the field has nothing to clear.
    for mesh in MESHES:
        getattr(mesh, "_pg_registry", {}).clear()
    dist.destroy_process_group()


def is_sharded(model: nn.Module) -> bool:
    """Whether FSDP sharded the model (seen through torch.compile's wrapper, _orig_mod)."""
    return FSDPModule is not None and isinstance(getattr(model, "_orig_mod", model), FSDPModule)


def gradient_sync(model: nn.Module, sync: bool):
    """Context for one micro-step's backward: gradients are reduced across processes only when sync is true,
    at the last micro-step; before it each process accumulates its own."""
    if is_sharded(model):
        getattr(model, "_orig_mod", model).set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if isinstance(model, DistributedDataParallel) and not sync:
        return model.no_sync()
    return contextlib.nullcontext()


def full_model_state(model: nn.Module) -> dict:
    """The state dict of the whole model on the CPU; under FSDP a collective call: every rank must make it."""
    if is_sharded(model):
        return get_model_state_dict(model, options=FULL_STATE)
    return model.state_dict()


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """optimizer.state_dict() as one process has it (parameters numbered in param-group order, whole tensors);
    under FSDP a collective call whose result only rank 0 receives."""
    # Before the first step there is no state to gather, and asking for it would make one: torch's state-dict
    # helper runs a step with zero gradients, which counts as AdamW's first and changes its bias correction.
    if not is_sharded(model) or not optimizer.state:
        return optimizer.state_dict()
    state = get_optimizer_state_dict(model, optimizer, options=FULL_STATE)
    if not state:
        return {}
    number = {name: i for i, name in enumerate(name for group in state["param_groups"] for name in group["params"])}
    return {"state": {number[name]: value for name, value in state["state"].items()},
            "param_groups": [{**group, "params": [number[name] for name in group["params"]]}
                             for group in state["param_groups"]]}


def with_group_settings(state: dict, optimizer: torch.optim.Optimizer) -> dict:
    """The saved optimizer state dict with each param group's settings (weight decay, betas, Muon's momentum and
    ns_steps, the kernels) taken from optimizer as this run built it, its per-parameter state (moments, steps) and
    group membership kept. torch's load_state_dict puts the saved groups' settings back, so a resume given another
    --weight_decay stepped with the old one; the rates need no care, the schedule sets them every step."""
    saved, built = state["param_groups"], optimizer.param_groups
    if len(saved) != len(built):  # a head_learning_rate given or dropped on resume adds or removes the head's group
        raise ValueError(f"the saved optimizer has {len(saved)} param groups, this run's has {len(built)}; resume "
                         "with the run's head_learning_rate (0 or not, as it was), or start a new run")
    groups = [{**{k: v for k, v in ours.items() if k != "params"}, "params": theirs["params"]}
              for theirs, ours in zip(saved, built, strict=True)]
    return {**state, "param_groups": groups}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a full optimizer state dict (from any process count) into a plain or a sharded optimizer: its moments,
    with this run's group settings (with_group_settings)."""
    state = with_group_settings(state, optimizer)
    if not is_sharded(model) or not state["state"]:
        optimizer.load_state_dict(state)
        return
    names = {param: name for name, param in model.named_parameters()}
    ordered = [names[param] for group in optimizer.param_groups for param in group["params"]]
    by_name = {"state": {ordered[i]: value for i, value in state["state"].items()},
               "param_groups": [{**group, "params": [ordered[i] for i in group["params"]]}
                                for group in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


def max_over_processes(values: list[float], world_size: int, device: torch.device) -> list[float]:
    """Each value's maximum over all processes (a flag set anywhere is set everywhere)."""
    if world_size == 1:
        return values
    tensor = torch.tensor([float(v) for v in values], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def mean_over_processes(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    """tensor averaged over all processes, in place. A sum then a division, which is all ReduceOp.AVG does: gloo
    (CPU processes) has AVG only since 2025 (pytorch/pytorch#149781), torch releases well above the floor."""
    if world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor /= world_size
    return tensor
