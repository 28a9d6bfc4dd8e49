"""GPT-2's weights in and out: a Hugging Face GPT-2 directory (config.json + model.safetensors or
pytorch_model.bin) to our model, and our model to a directory that transformers' GPT2LMHeadModel loads.
"""

import json
import os
from pathlib import Path

import torch

from model import GPT, GPTConfig

GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # the OpenAI checkpoints from_pretrained knows


def from_pretrained(name_or_dir: str, dropout: float = 0.0) -> GPT:
    """GPT-2 weights from a local Hugging Face directory, or by name (gpt2, gpt2-medium, ...) with network."""
    directory = Path(name_or_dir)
    if not directory.is_dir():
        directory = download_hf_gpt2(name_or_dir)
    hf_config = json.loads((directory / "config.json").read_text())
    if hf_config.get("activation_function", "gelu_new") != "gelu_new" or hf_config.get("n_inner") not in (
            None, 4 * hf_config["n_embd"]):
        raise ValueError(f"{directory} is not a GPT-2 architecture this model can hold (activation, n_inner)")
    config = GPTConfig(block_size=hf_config["n_positions"], vocab_size=hf_config["vocab_size"],
                       n_layer=hf_config["n_layer"], n_head=hf_config["n_head"], n_embd=hf_config["n_embd"],
                       dropout=dropout, bias=True, pos_encoding="learned")
    model = GPT(config)
    model.load_state_dict(hf_to_ours(read_hf_weights(directory)))
    return model


# The architecture options whose GPT-2 setting transformers' GPT2LMHeadModel has (GPTConfig's defaults;
# zero_init_proj and zero_init_head change only the start, not the architecture).
GPT2_ARCHITECTURE = {"mlp_activation": "gelu", "qk_norm": False, "logit_softcap": 0.0, "tie_head": True,
                     "value_embeddings": 0, "value_residual": False, "x0_shortcut": False, "smear": False,
                     "bigram_embedding": 0}


def export_hf(model: GPT, directory: str | os.PathLike) -> None:
    """Write config.json + model.safetensors that transformers' GPT2LMHeadModel.from_pretrained loads."""
    from safetensors.torch import save_file

    if model.config.pos_encoding != "learned":
        raise ValueError(f"GPT-2 in transformers has a learned position table; this model has "
                         f"pos_encoding={model.config.pos_encoding!r}: only 'learned' models can be exported")
    other = [f"{name}={getattr(model.config, name)!r} (GPT-2's: {value!r})" for name, value in
             (*GPT2_ARCHITECTURE.items(), ("random_positions", 0)) if getattr(model.config, name) != value]
    if other:  # the model's own values: the message printed GPT-2's before, tie_head=True for an untied model
        raise ValueError(f"this model is not GPT-2's architecture, which transformers' GPT2LMHeadModel is: "
                         f"{', '.join(other)}; only a model with every such option off can be exported")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    c = model.config
    hf_config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
                 "n_positions": c.block_size, "n_ctx": c.block_size, "n_embd": c.n_embd, "n_layer": c.n_layer,
                 "n_head": c.n_head, "n_inner": None,
                 "activation_function": "gelu_new" if c.gelu == "tanh" else "gelu",  # gelu: transformers' erf
                 "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
                 "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "tie_word_embeddings": True,
                 # GPT-2's <|endoftext|>, where the vocabulary has it
                 "bos_token_id": 50256 if c.vocab_size > 50256 else None,
                 "eos_token_id": 50256 if c.vocab_size > 50256 else None}
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2))
    save_file(ours_to_hf(model.state_dict(), c), str(directory / "model.safetensors"), metadata={"format": "pt"})


# Hugging Face's GPT-2 stores these Linear layers as Conv1D, whose weight is the transpose of ours.
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_to_ours(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = {}
    for key, tensor in hf_state.items():
        key = key.removeprefix("transformer.")
        if key.endswith((".attn.bias", ".attn.masked_bias")) or key == "lm_head.weight":
            continue  # causal-mask buffers of old checkpoints; the head is tied to wte
        if key in ("wte.weight", "wpe.weight"):
            key = "input_layer." + key.removesuffix(".weight")
        elif key.startswith("h."):
            key = "blocks." + key.removeprefix("h.")
        if key.endswith(_CONV1D):
            tensor = tensor.t()
        state[key] = tensor.contiguous()
    state["lm_head.weight"] = state["input_layer.wte"]
    return state


def ours_to_hf(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    hf_state = {}
    for key, tensor in state.items():
        if key == "lm_head.weight":
            continue  # tied to wte; transformers ties it again on load
        if key.endswith(_CONV1D):
            tensor = tensor.t()
        if key.startswith("input_layer."):
            key = key.removeprefix("input_layer.") + ".weight"
        elif key.startswith("blocks."):
            key = "h." + key.removeprefix("blocks.")
        hf_state["transformer." + key] = tensor.detach().cpu().contiguous()
    if not config.bias:  # transformers' GPT-2 always has biases; zeros are the same function
        for key in [k for k in hf_state if k.startswith(("transformer.h.", "transformer.ln_f"))]:
            # a Conv1D weight is (in, out) and a LayerNorm gain (width,): the bias is as long as the last dim
            hf_state[key.removesuffix("weight") + "bias"] = torch.zeros(hf_state[key].shape[-1])
    return hf_state


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(directory / "model.safetensors"))
    if (directory / "pytorch_model.bin").exists():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{directory} has neither model.safetensors nor pytorch_model.bin")


def download_hf_gpt2(name: str) -> Path:
    """Fetch config.json and the weights of a GPT-2 from the Hugging Face hub (or its local cache)."""
    if name.removeprefix("openai-community/") not in GPT2_NAMES:
        raise ValueError(f"{name!r} is neither a local directory nor one of {GPT2_NAMES}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise ImportError(f"loading {name!r} by name needs `pip install transformers`; or pass a local "
                           "directory with config.json and model.safetensors") from e
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
    try:
        return Path(snapshot_download(name, allow_patterns=["config.json", "model.safetensors"]))
    except Exception as e:
        raise ConnectionError(f"could not download {name!r} from the Hugging Face hub ({type(e).__name__}); offline, "
                           "pass a local directory holding config.json and model.safetensors instead") from e
