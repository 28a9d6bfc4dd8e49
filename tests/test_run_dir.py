"""run_dir.py on its own: the claim on out_dir (lock, an old run, stale temps), metrics.jsonl's replace-then-append,
and Ctrl-C/SIGTERM turned into a request. train.py's use of them is in test_train.py, test_run_dir_faults.py (the
claim) and test_train_faults.py (the signals)."""

import contextlib
import json
import os
import signal
import sys
import weakref

import pytest
import torch

from errors import UserError
from training.run_dir import Interrupted, MetricsLog, StopRequest, claim_out_dir


def test_a_new_run_over_an_old_one_needs_resume_or_overwrite(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "best.pt").write_bytes(b"old")
    with contextlib.ExitStack() as stack, pytest.raises(UserError, match=r"already holds a run \(best\.pt, "
                                                                       r"metrics\.jsonl\).*--overwrite=True"):
        claim_out_dir(str(tmp_path), stack, resume=False, overwrite=False)
    for resume, overwrite in ((True, False), (False, True)):
        with contextlib.ExitStack() as stack:
            claim_out_dir(str(tmp_path), stack, resume=resume, overwrite=overwrite)
    assert (tmp_path / "best.pt").read_bytes() == b"old"  # claiming deletes nothing of the run


def test_the_claim_locks_until_the_stack_closes_and_clears_stale_temps(tmp_path, capsys):
    (tmp_path / "ckpt.pt123abc.tmp").write_bytes(b"PK partial")
    (tmp_path / "notes.txt.tmp").write_bytes(b"not ours")
    with contextlib.ExitStack() as first:
        claim_out_dir(str(tmp_path), first, resume=True, overwrite=False)
        assert "ckpt.pt123abc.tmp" in capsys.readouterr().out
        with contextlib.ExitStack() as second, pytest.raises(UserError, match=f"in use.*process {os.getpid()}"):
            claim_out_dir(str(tmp_path), second, resume=True, overwrite=False)
    with contextlib.ExitStack() as third:  # released
        claim_out_dir(str(tmp_path), third, resume=True, overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt.tmp", "train.lock"]


def test_an_unclaimed_out_dir_is_only_checked(tmp_path):
    with contextlib.ExitStack() as stack:
        claim_out_dir(str(tmp_path / "new"), stack, resume=False, overwrite=False, claim=False)
    assert not (tmp_path / "new").exists()  # eval_only, and ranks other than 0, make nothing
    (tmp_path / "file").write_text("")
    with contextlib.ExitStack() as stack, pytest.raises(UserError, match="is a file, not a folder"):
        claim_out_dir(str(tmp_path / "file"), stack, resume=False, overwrite=False, claim=False)


def test_metrics_log_replaces_at_the_first_record_and_appends_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iter": 99}\n')
    sent = []

    class Wandb:
        def log(self, data, step):
            sent.append((step, data))

    log = MetricsLog(path, append=False, wandb_run=Wandb())
    assert path.read_text() == '{"iter": 99}\n'  # kept until the new run writes
    log.write({"iter": 0, "val_loss": 2.5})
    log.write({"iter": 1, "train_loss": 2.0})
    MetricsLog(path, append=True).write({"iter": 2, "train_loss": 1.5})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"iter": 0, "val_loss": 2.5}, {"iter": 1, "train_loss": 2.0}, {"iter": 2, "train_loss": 1.5}]
    assert sent == [(0, {"val_loss": 2.5}), (1, {"train_loss": 2.0})]


def test_stop_request_turns_the_first_signal_into_a_flag_and_the_second_into_an_abort(monkeypatch, capsys):
    from training import run_dir

    def exit_now(status):  # os._exit would end pytest too
        raise SystemExit(status)

    monkeypatch.setattr(run_dir.os, "_exit", exit_now)
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        assert stop.signal == 0
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == signal.SIGTERM
        with pytest.raises(SystemExit) as aborted:
            os.kill(os.getpid(), signal.SIGINT)
        assert aborted.value.code == 128 + signal.SIGINT  # the second signal's own status
        assert capsys.readouterr().err == "aborted by a second SIGINT: the checkpoints are the last ones saved whole\n"
        assert stop.signal == signal.SIGTERM  # the first is the one reported
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_whose_raise_is_lost_ends_the_evaluation_at_its_next_batch():
    """Seen once in CI: the handler's Interrupted landed in a finalizer (Python printed it and went on), and an
    evaluation of eval_iters=10**9 ran past the test's 60 s. Now each batch polls the signal first."""
    import numpy as np

    from train import TrainConfig, estimate_loss

    class Counting(torch.nn.Module):
        def forward(self, x, y):
            self.calls = getattr(self, "calls", 0) + 1
            return None, torch.tensor(1.0)

    model = Counting()
    splits = {"train": np.arange(1000, dtype=np.uint16), "val": np.arange(1000, dtype=np.uint16)}
    config = TrainConfig(eval_iters=50, batch_size=2)
    with StopRequest() as stop:
        stop.poll()  # no signal, no block: nothing
        with stop.interruptible():
            assert estimate_loss(model, {"val": splits["val"][:100]}, TrainConfig(eval_iters=3, batch_size=2), 8,
                                 torch.device("cpu"), torch.float32, poll=stop.poll) == {"val": 1.0}
            with contextlib.suppress(Interrupted):  # lost, as in a finalizer
                stop.handle(signal.SIGTERM, None)
            calls = model.calls
            with pytest.raises(Interrupted):
                estimate_loss(model, splits, config, 8, torch.device("cpu"), torch.float32, poll=stop.poll)
            assert model.calls == calls  # ended before its first batch
        stop.poll()  # outside the block the signal waits for the end of the step


def test_a_signal_lost_in_a_weakref_callback_is_not_reported_and_other_faults_there_still_are(monkeypatch):
    """Seen in CI: SIGTERM during a compiled evaluation landed in one of torch.compile's weakref callbacks, and
    Python printed "Exception ignored in ... Traceback" for the handler's Interrupted before the run saved and
    exited. The real handler runs inside a real callback here (signal.raise_signal checks for signals before it
    returns); Python's report of it must not reach the hook, another fault there must, and poll() raises it."""
    reported = []

    def recorder(report):
        reported.append(report.exc_type)

    monkeypatch.setattr(sys, "unraisablehook", recorder)

    class Held:
        pass

    def signalled(ref):
        signal.raise_signal(signal.SIGTERM)

    def faulty(ref):
        raise ValueError("a fault of its own")

    lost = []
    with StopRequest() as stop:
        with pytest.raises(Interrupted), stop.interruptible():
            held = Held()
            refs = [weakref.ref(held, signalled), weakref.ref(held, faulty)]
            del held  # both callbacks run now, inside Python's finalization of the object
            lost.append(stop.signal)  # the handler ran, and its raise did not come out here
            stop.poll()
        assert lost == [signal.SIGTERM] and len(refs) == 2
        assert reported == [ValueError]
    assert sys.unraisablehook is recorder  # the hook it found is back
