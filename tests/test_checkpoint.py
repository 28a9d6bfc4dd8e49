"""checkpoint.py: atomic save, weights-only load, rebuilding the model from a checkpoint, and checkpoints that
earlier code wrote: they load with the logits they gave, and resume as that code resumed them."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from model import GPT, GPTConfig
from train import TrainConfig, train
from training import checkpoint
from training.checkpoint import load_checkpoint, model_from_checkpoint, read_checkpoint, save_checkpoint


def tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=2, n_head=2, n_embd=32)).eval()


def state_of(model: GPT) -> dict:
    return {"model_args": {**vars(model.config)}, "model": model.state_dict(), "iter_num": 7,
            "best_val_loss": 1.5, "tokenizer": {"kind": "char", "chars": "ab", "vocab_size": 2}}


def interrupted_save(real_save, error: BaseException):
    """A torch.save that writes part of the file, then fails (a full disk, a kill, a Ctrl-C)."""
    calls = []

    def save(obj, file, *args, **kwargs):
        calls.append(file)
        file.write(b"PK\x03\x04 partial checkpoint bytes")
        file.flush()
        raise error

    return save, calls


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk_full", "ctrl_c"])
def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch, error):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(state_of(tiny_model(0)), path)
    before = path.read_bytes()
    fake_save, calls = interrupted_save(torch.save, error)
    monkeypatch.setattr(checkpoint.torch, "save", fake_save)
    with pytest.raises(UserError if isinstance(error, OSError) else type(error)):  # a full disk: one line
        save_checkpoint(state_of(tiny_model(1)), path)
    assert len(calls) == 1
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"], "a temporary file was left behind"
    monkeypatch.undo()
    assert load_checkpoint(path)["iter_num"] == 7


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    fake_save, _ = interrupted_save(torch.save, RuntimeError("boom"))
    monkeypatch.setattr(checkpoint.torch, "save", fake_save)
    with pytest.raises(RuntimeError, match="boom"):
        save_checkpoint({"x": torch.zeros(2)}, tmp_path / "sub" / "ckpt.pt")
    assert list((tmp_path / "sub").iterdir()) == []


def test_save_replaces_and_round_trips(tmp_path):
    path = tmp_path / "ckpt.pt"
    base = state_of(tiny_model(0))
    save_checkpoint({**base, "x": torch.arange(3), "note": "first"}, path)
    save_checkpoint({**base, "x": torch.arange(4), "note": "second", "nested": {"a": [1, 2.5, None]}}, path)
    state = load_checkpoint(path)
    assert state["note"] == "second" and torch.equal(state["x"], torch.arange(4))
    assert state["nested"] == {"a": [1, 2.5, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


class Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_load_is_weights_only(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "payload": Payload(marker)}, path)
    with pytest.raises(UserError, match=r"evil\.pt holds pickled objects other than tensors") as error:
        load_checkpoint(path)
    assert "weights_only=False" not in str(error.value) and "Traceback" not in str(error.value)
    assert not marker.exists()
    # The control: an unrestricted load does run the payload, so the file really carries code.
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_load_missing_checkpoint(tmp_path):
    with pytest.raises(UserError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing.pt")


def test_model_from_checkpoint_gives_the_same_logits(tmp_path):
    model = tiny_model(3)
    with torch.no_grad():
        for p in model.parameters():  # move away from the initialisation, so a fresh model would differ
            p.add_(0.1 * torch.randn_like(p))
    save_checkpoint(state_of(model), tmp_path / "ckpt.pt")
    rebuilt = model_from_checkpoint(load_checkpoint(tmp_path / "ckpt.pt")).eval()
    assert rebuilt.config == model.config
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(rebuilt(idx)[0], model(idx)[0])
        assert not torch.allclose(tiny_model(3)(idx)[0], model(idx)[0])
    assert rebuilt.lm_head.weight is rebuilt.input_layer.wte  # still tied after loading


def test_checkpoint_from_before_the_position_settings_loads_with_their_old_values(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=1, n_head=2, n_embd=32,
                          pos_encoding="sinusoidal")).eval()
    state = state_of(model)
    for name in ("learned_init_std", "sinusoidal_amplitude", "rope_base"):  # added to GPTConfig later
        del state["model_args"][name]
    save_checkpoint(state, tmp_path / "ckpt.pt")
    rebuilt = model_from_checkpoint(load_checkpoint(tmp_path / "ckpt.pt")).eval()
    # the values that were module constants then: wpe ~ N(0, 0.01^2), sinusoids x 0.02, base 10000
    c = rebuilt.config
    assert (c.learned_init_std, c.sinusoidal_amplitude, c.rope_base) == (0.01, 0.02, 10000.0)
    idx = torch.randint(0, 37, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(rebuilt(idx)[0], model(idx)[0])


# ---- checkpoints written by earlier code (tests/fixtures/checkpoints_03c7507/make.py made them) ---------------

OLD = Path(__file__).resolve().parent / "fixtures" / "checkpoints_03c7507"


def draws_dropout_as_recorded() -> bool:
    """Whether this torch's CPU dropout draws, from one seed, the mask that the torch which recorded the resumed
    runs drew (2.13; 2.11 too). Torch 2.3 draws another, so the resumed runs' losses are others there."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        kept = torch.nn.functional.dropout(torch.ones(16), 0.5) > 0
    return kept.tolist() == [i in (2, 6, 7, 9, 10, 11, 12, 14, 15) for i in range(16)]


@pytest.mark.parametrize("encoding", ["learned", "rope", "alibi"])
def test_a_checkpoint_from_commit_03c7507_loads_with_its_logits(encoding):
    expected = torch.load(OLD / encoding / "expected.pt", weights_only=True)
    model, state = read_checkpoint(OLD / encoding / "ckpt.pt")
    assert sorted(state["model"]) == sorted(model.state_dict())  # the state-dict keys have not moved
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(expected["tokens"], expected["tokens"])[0], expected["logits"],
                                   atol=1e-6, rtol=0)
    assert model.config.pos_encoding == encoding


def test_a_best_pt_from_commit_03c7507_loads_with_the_resumed_logits():
    """best.pt (the weights only) of the rope run, saved at step 4 of the resumed run, where val loss fell."""
    expected = torch.load(OLD / "rope" / "expected.pt", weights_only=True)
    model, state = read_checkpoint(OLD / "rope" / "best.pt")
    assert state["iter_num"] == 4 and "optimizer" not in state
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(expected["tokens"], expected["tokens"])[0],
                                   expected["resumed_logits"], atol=1e-6, rtol=0)


@pytest.mark.skipif(not draws_dropout_as_recorded(), reason="this torch draws other dropout masks from a seed")
@pytest.mark.parametrize("encoding", ["learned", "rope", "alibi"])
def test_a_checkpoint_from_commit_03c7507_resumes_as_that_code_resumed_it(tmp_path, encoding):
    """Resumed to step 4 (dropout on: the saved random streams matter), today's code gives the train losses
    and the final logits that the code of 03c7507 gave resuming the same file."""
    expected = torch.load(OLD / encoding / "expected.pt", weights_only=True)
    shutil.copytree(OLD / "data", tmp_path / "data")
    (tmp_path / "run").mkdir()
    shutil.copy(OLD / encoding / "ckpt.pt", tmp_path / "run" / "ckpt.pt")
    result = train(TrainConfig(**expected["train_settings"], out_dir=str(tmp_path / "run"),
                               dataset=str(tmp_path / "data"), max_iters=4, init_from="resume"),
                   GPTConfig(**expected["model_settings"]))
    assert [r["iter"] for r in result["train_losses"]] == [3, 4]
    np.testing.assert_allclose([r["loss"] for r in result["train_losses"]],
                               [r["loss"] for r in expected["resumed_train_losses"]], rtol=1e-6)
    resumed, _ = read_checkpoint(tmp_path / "run" / "ckpt.pt")
    with torch.no_grad():
        torch.testing.assert_close(resumed.eval()(expected["tokens"], expected["tokens"])[0],
                                   expected["resumed_logits"], atol=1e-6, rtol=0)
