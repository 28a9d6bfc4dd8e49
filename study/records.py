"""A study run's records: done.json (every setting that changes the run's numbers, its checkpoint's identity, and
where and how it trained) and eval.json (its evaluation, keyed by that checkpoint), each sealed by a digest so that
an edited record is refused; and the settings two runs are compared by."""

import functools
import hashlib
import json
import platform
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from layers.positions import ENCODINGS
from model import GPTConfig
from study.plan import StudyRun
from text.dataset import resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig
from training.checkpoint import load_checkpoint
from training.run_dir import DONE_FILE

# TrainConfig fields that change no number: where a run logs, and where its data lies and whether its batches are
# prefetched (the data's description, with its splits' SHA-256s, says what data it is; prefetching is bit-identical).
NEUTRAL = ("progress", "out_dir", "wandb_log", "wandb_project", "wandb_run_name", "wandb_mode", "dataset", "prefetch")
# GPTConfig fields added after records were committed (later encodings and architecture options), with defaults:
# there they do what the code before them did, so they stay out of a run's settings (a default must never change).
LATER_MODEL_FIELDS = {name: getattr(GPTConfig, name) for name in (
    "partial_rope_fraction", "p_rope_fraction", "xpos_gamma", "xpos_scale_base", "kerple_kernel", "fire_width",
    "cope_positions", "random_positions", "mlp_activation", "qk_norm", "zero_init_proj", "logit_softcap", "tie_head",
    "zero_init_head", "value_embeddings", "value_residual", "x0_shortcut", "smear", "bigram_embedding",
    "rope_heads", "nope_every", "fox_bias_init", "dynamic_bias_depth",
    "dynamic_bias_log_distance", "dynamic_bias_norm")}
# TrainConfig fields added after records were committed, with defaults that do what the code before them did
LATER_TRAIN_FIELDS = {"head_learning_rate": 0.0, "muon_momentum_warmup": 0, "muon_momentum_start": 0.85,
                      "muon_orthogonalize": "newton_schulz", "normuon": False, "cautious_weight_decay": False,
                      "ema_decay": 0.0, "ema_start": 0, "muon_orthogonalize_steps": 5, "batch_size_warmup": 0,
                      "batch_size_start": 0, "muon_orthogonalize_dtype": "bfloat16",
                      "muon_orthogonalize_scaling": "frobenius"}
RUN_RECORDS = (DONE_FILE, "eval.json")
# What a run's done.json holds, every field needed by a later reuse or by the report; eval.json holds EVAL_FIELDS.
RECORD_FIELDS = ("variant", "seed", "budget", "role", "tokens_per_iter", "parameters", "iter_num",
                 "final_val_estimate", "tokens_per_sec", "train_seconds", "evals", "train_losses", "settings",
                 "checkpoint", "provenance")
EVAL_FIELDS = ("key", "split", "seconds", "protocols")


def settings(run: StudyRun) -> dict:
    """Everything that changes a run's numbers: both configs (less NEUTRAL fields), the data's description (with
    its split's identity: rule, fractions, token counts, SHA-256 of each .bin), and, for a run of a study's plan,
    the split it is scored on and the run it continues (its folder, by name); a finetune (ablate's from_cell),
    whose init_from is given at train time (the checkpoint does not exist before), names the run it starts from."""
    found = config_settings(run.train_config, run.model_config)
    found["run"] = {"scored_on": run.split, "starts_from": run.start_from and run.start_from.name}
    if run.finetune:
        found["run"]["finetunes"] = "/".join(run.start_from.parts[-2:])  # <cell>/seed<N>
    return found


def config_settings(train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """settings() of the configs alone (a study's base configs are no run). Under AdamW the optimizer and Muon's
    settings are left out: they change no number there, and every record made before --optimizer existed lacks
    them (so that those records, and the studies they make, stay what they were). So are the GPTConfig fields of
    LATER_MODEL_FIELDS at their defaults, where the run's encoding does not read them, and those of
    LATER_TRAIN_FIELDS at their defaults."""
    adamw = {"optimizer", "muon_learning_rate", "muon_momentum"} if train_config.optimizer == "adamw" else set()
    later = {k for k, v in LATER_TRAIN_FIELDS.items() if getattr(train_config, k) == v}  # as records before them
    own = ENCODINGS[model_config.pos_encoding].settings
    model = {k: v for k, v in asdict(model_config).items()
             if not (k in LATER_MODEL_FIELDS and k not in own and v == LATER_MODEL_FIELDS[k])}
    # finetune is the run's (a from_cell run starts from its base's weights at step 0): settings()' "finetunes"
    return {"train_config": {k: v for k, v in asdict(train_config).items()
                             if k not in {*NEUTRAL, *adamw, *later, "finetune"}},
            "model_config": model, "data": data_identity(train_config.dataset)}


def data_identity(dataset: str) -> dict:
    """The prepared data's description less the file it was prepared from: the same bytes prepared from another
    path, on another machine, are the same data (the splits' SHA-256s say so), and no path goes into a record. Less
    vocabulary_sha256 too: a checksum of the vocabulary the description holds (so no other data), which folders
    prepared before it lack, as do the records made on them."""
    return {k: v for k, v in read_description(resolve_data_dir(dataset)).items()
            if k not in ("source", "vocabulary_sha256")}


def changed_settings(stored: dict, current: dict) -> list[str]:
    """Settings that differ, or that the stored run does not record (made by older code: its value is unknown)."""
    missing = object()
    return sorted(name for section in current for name, value in current[section].items()
                  if stored.get(section, {}).get(name, missing) != value)


def read_json(path: Path) -> tuple[dict | None, str]:
    """(the JSON object in path, ""); (None, "") when there is no such file; (None, what is wrong) when it is
    not one whole JSON object (cut short, empty, edited)."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None, ""
    except IsADirectoryError:
        return None, "a folder, not a file"
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{type(e).__name__}: {e}"
    return (value, "") if isinstance(value, dict) else (None, f"a JSON {type(value).__name__}, not an object")


def digest(record: dict) -> str:
    """sha256 of a record's canonical JSON, its own "digest" left out: what tells a record that was written by the
    study from one edited since (a hand-set iter_num, a changed loss)."""
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed(record: dict) -> str:
    """The record as its file holds it: its JSON with its digest."""
    return json.dumps({**record, "digest": digest(record)}, indent=1)


def read_record(path: Path, required: tuple[str, ...]) -> tuple[dict | None, str]:
    """(the record in path, ""); (None, "") when there is none; (None, what is wrong) when it is damaged, was
    edited after the study wrote it (its digest), or lacks a field the study needs (older code wrote it)."""
    record, damage = read_json(path)
    if record is None:
        return None, damage
    missing = [name for name in (*required, "digest") if name not in record]
    if missing:
        return None, f"it lacks {', '.join(missing)}: written by older code or by hand"
    if record["digest"] != digest(record):
        return None, "its contents no longer match its digest: edited after the study wrote it"
    return record, ""


def checkpoint_identity(path: Path) -> dict:
    """What identifies a checkpoint's training state, wherever it was written: a sha256 over its weights, optimizer
    and random states and step, in a fixed order. Not its file's bytes: those hold the run's folder (its config's
    out_dir), so the same training in another folder, or a checkpoint trained again, would differ. Computed once
    per file as it is on disk (a rewrite is a new inode or mtime): a study checks each run's checkpoint in its
    check before training, its reuse and its evaluation's key, and each time was a whole load."""
    return dict(checkpoint_facts(path)[0])


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint was saved at (its iter_num), from the same cached load as checkpoint_identity: what a
    record's iter_num must say, edited or not."""
    return checkpoint_facts(path)[1]


def checkpoint_facts(path: Path) -> tuple[dict, int]:
    """(checkpoint_identity, checkpoint_step) of the file at path, loaded once per file as it is on disk."""
    stat = path.stat()
    return state_facts(str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def state_facts(path: str, inode: int, size: int, mtime_ns: int) -> tuple[dict, int]:
    """(checkpoint_identity, checkpoint_step) of the file at path with this inode, size and mtime (the cache's key)."""
    state = load_checkpoint(Path(path))
    found = hashlib.sha256()

    def add(value) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                found.update(repr(key).encode())
                add(value[key])
        elif isinstance(value, list | tuple):
            for item in value:
                add(item)
        elif isinstance(value, torch.Tensor):
            found.update(f"{value.dtype}{tuple(value.shape)}".encode())
            found.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            found.update(repr(value).encode())

    add({key: state[key] for key in ("model", "optimizer", "rng", "iter_num", "best_val_loss")})
    return {"sha256": found.hexdigest(), "of": "weights, optimizer and random states, step"}, int(state["iter_num"])


# The instruction sets torch's CPU kernels (oneDNN, MKL, inductor's code) are chosen by: two CPUs of one model name
# can differ in them (a virtual machine may hide some), and then in their last bits.
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "sve", "sve2")


def provenance(dtype: str, wall_seconds: float) -> dict:
    """What a run trained on and with: the code's commit (and whether the tree differed from it) when the study
    started, torch, the device, the CPU (cpu_description), the threads, the dtype it trained in and its wall time."""
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {**code_version(), "torch": torch.__version__, "device": device, **cpu_description(cpu_info()),
            "threads": torch.get_num_threads(), "dtype": dtype, "wall_seconds": wall_seconds}


def cpu_description(info: str) -> dict:
    """The CPU as /proc/cpuinfo's first processor gives it: its model name ("cpu"), what tells two CPUs of that
    name apart ("cpu_id": vendor, family, model, stepping; an ARM's implementer, part, variant, revision) and the
    KERNEL_FLAGS it has ("cpu_flags")."""
    fields = {}
    for line in info.split("\n\n")[0].splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    ids = ("vendor_id", "cpu family", "model", "stepping", "CPU implementer", "CPU part", "CPU variant", "CPU revision")
    flags = set((fields.get("flags") or fields.get("Features", "")).split())
    return {"cpu": fields.get("model name") or platform.processor() or platform.machine(),
            "cpu_id": ", ".join(f"{name} {fields[name]}" for name in ids if fields.get(name)),
            "cpu_flags": [flag for flag in KERNEL_FLAGS if flag in flags]}


@functools.cache
def code_version() -> dict:
    """The commit of the code this process runs and whether tracked files differed from it, read once (the study
    and each --jobs worker call it first): a commit made while a study runs is not the code its runs trained with."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                  cwd=Path(__file__).parent).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD") or "unknown", "dirty": bool(git("status", "--porcelain", "-uno"))}


def cpu_info() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""
