"""nanoGPT's checkpoints as they are (out_dir/ckpt.pt), read into this repo's format, and a run continued from one;
its data folders are text/nanogpt_data.py's. Nothing here writes to them.

A nanoGPT checkpoint is a dict of `model` (its state dict, keys under `transformer.`, with `_orig_mod.` in front
where it was compiled), `optimizer`, `model_args` (n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout),
`iter_num`, `best_val_loss` and `config` (its train.py's settings, `dataset` among them). Its architecture is ours
with pos_encoding=learned and the exact (erf) GELU of torch's nn.GELU, which nanoGPT uses where GPT-2 used tanh.
"""

import math
from pathlib import Path

import torch

from errors import UserError
from text.nanogpt_data import GPT2_VOCAB_SIZE, char_tokenizer, read_meta
from training.parallel import load_optimizer_state
from training.run_dir import CHECKPOINT

MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")


def is_checkpoint(state: object) -> bool:
    """Whether a loaded checkpoint is nanoGPT's: model_args and model, no tokenizer, keys under transformer."""
    return (isinstance(state, dict) and "tokenizer" not in state and isinstance(state.get("model_args"), dict)
            and isinstance(state.get("model"), dict)
            and any(str(key).removeprefix("_orig_mod.").startswith("transformer.") for key in state["model"]))


def init_checkpoint(init_from: str) -> Path | None:
    """The checkpoint an init_from names: a .pt file, or a run folder holding ckpt.pt (nanoGPT's out_dir or
    ours); None for anything else (scratch, resume, a GPT-2 name, a Hugging Face folder)."""
    path = Path(init_from)
    if path.is_file() and path.suffix == ".pt":
        return path
    if path.is_dir() and (path / CHECKPOINT).is_file() and not (path / "config.json").is_file():
        return path / CHECKPOINT
    return None


def our_key(key: str) -> str:
    """nanoGPT's state-dict key -> ours (transformer.h.0.attn.c_attn.weight -> blocks.0.attn.c_attn.weight)."""
    key = key.removeprefix("_orig_mod.")
    if key in ("transformer.wte.weight", "transformer.wpe.weight"):
        return "input_layer." + key.split(".")[1]
    return key.replace("transformer.h.", "blocks.", 1).removeprefix("transformer.")


def to_ours(state: dict, path: Path) -> dict:
    """A nanoGPT checkpoint as one of ours: settings, weights, tokenizer, and what continuing it needs."""
    args = state["model_args"]
    unknown, missing = sorted(set(args) - set(MODEL_ARGS)), [name for name in MODEL_ARGS if name not in args]
    missing += [name for name in MODEL_ARGS[:4] + ("vocab_size",) if name in args and type(args[name]) is not int]
    if unknown or missing:
        raise UserError(f"{path}: its model_args are not nanoGPT's {', '.join(MODEL_ARGS)} (unknown {unknown}, "
                        f"missing or not an int {missing}): a checkpoint of a changed nanoGPT cannot be read here")
    model_args = {**args, "pos_encoding": "learned", "gelu": "erf"}  # the types are checked with ours
    # .attn.bias is the causal mask nanoGPT keeps where torch lacks flash attention: a buffer, not a weight.
    weights = {our_key(key): tensor for key, tensor in state["model"].items() if not key.endswith(".attn.bias")}
    ours = {"model_args": model_args, "model": weights, "tokenizer": checkpoint_tokenizer(state, path, args)}
    if isinstance(state.get("optimizer"), dict):
        try:  # best_val_loss is a 0-d tensor: nanoGPT's estimate_loss returns tensors
            ours.update(optimizer=state["optimizer"], iter_num=int(state.get("iter_num", 0)),
                        best_val_loss=float(state.get("best_val_loss", float("inf"))))
        except (TypeError, ValueError, RuntimeError) as e:
            raise UserError(f"{path}: iter_num or best_val_loss is not a number ({e})") from None
    return ours


def checkpoint_tokenizer(state: dict, path: Path, args: dict) -> dict:
    """The meta.pkl of the dataset its config names, where nanoGPT's sample.py looks (data/<dataset>/ in the
    folder it runs in) or beside its out_dir; else GPT-2's BPE, as nanoGPT's sample.py assumes."""
    dataset = state.get("config", {}).get("dataset") if isinstance(state.get("config"), dict) else None
    places = [Path("data", dataset, "meta.pkl"), path.parent.parent / "data" / dataset / "meta.pkl"] \
        if isinstance(dataset, str) and dataset else []
    meta = next((place for place in places if place.is_file()), None)
    if meta is not None:
        return char_tokenizer(read_meta(meta), meta)
    if args["vocab_size"] < GPT2_VOCAB_SIZE:
        looked = ", ".join(map(str, places)) or "nowhere: its config names no dataset"
        raise UserError(f"{path}: its model has vocab_size={args['vocab_size']}, fewer than GPT-2's "
                        f"{GPT2_VOCAB_SIZE}, but no meta.pkl of its dataset was found (looked at {looked}); run from "
                        "the folder that holds data/<dataset>/meta.pkl, as nanoGPT's sample.py does")
    return {"kind": "gpt2", "vocab_size": GPT2_VOCAB_SIZE}


def optimizer_state_fits(saved: object, optimizer) -> bool:
    """Whether a saved AdamW state has the groups, the parameter count and the moment shapes of optimizer."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not isinstance(saved, dict) or [len(g["params"]) for g in saved.get("param_groups", [])] != [
            len(g["params"]) for g in optimizer.param_groups]:
        return False
    return all(type(i) is int and 0 <= i < len(params) and tuple(moments["exp_avg"].shape) == tuple(params[i].shape)
               for i, moments in saved.get("state", {}).items() if "exp_avg" in moments)


def continue_training(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict, source: Path,
                      kind: str) -> tuple[int, float]:
    """Carry on the run a checkpoint came from where its optimizer state fits the optimizer built here (of kind, an
    optimizers.OPTIMIZERS name): load its moments into optimizer and return its step and best val loss to go on
    from. Else the weights alone are trained, as a finetune: from step 0, no best val loss yet (0, inf)."""
    saved = state.get("optimizer")
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained_with = config.get("optimizer", "adamw")  # nanoGPT's and the checkpoints before --optimizer: AdamW
    if trained_with != kind:
        print(f"{source}: its optimizer state is optimizer={trained_with!r}'s, and this run's optimizer is {kind!r}; "
              "training its weights from step 0 with a fresh optimizer")
        return 0, math.inf
    if not optimizer_state_fits(saved, optimizer):
        print(f"{source}: its optimizer state does not fit this model; training its weights from step 0")
        return 0, math.inf
    try:  # the moments are the checkpoint's; betas, weight decay and kernels this run's (load_optimizer_state)
        load_optimizer_state(model, optimizer, saved)
    except (ValueError, KeyError, TypeError, RuntimeError) as e:  # only the file's content can cause these here
        raise UserError(f"{source}: its optimizer state cannot be loaded ({type(e).__name__}: "
                        f"{str(e)[:200]})") from None
    iter_num = int(state["iter_num"])
    print(f"continuing {source} from step {iter_num} with its optimizer state")
    return iter_num, float(state["best_val_loss"])
