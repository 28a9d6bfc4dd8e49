"""What a run folder (out_dir) holds and guards: one training at a time (the lock), the run already there (no
new run over it without --overwrite), metrics.jsonl and wandb beside it, and Ctrl-C/SIGTERM turned into a save.

The checkpoints' contents are checkpoint.py's; this module only knows their names.
"""

import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

from errors import UserError, silence_stdout
from files import lock_folder, remove_stale_temps

CHECKPOINT = "ckpt.pt"  # the latest checkpoint, what resume continues and a study scores (nanoGPT's name)
BEST = "best.pt"  # the checkpoint of the lowest val loss, what sample.py prefers
RUN_FILES = (CHECKPOINT, BEST, "metrics.jsonl")  # what a run leaves in out_dir
CHECKPOINT_FILES = (CHECKPOINT, BEST)  # written through a temp file (a killed save leaves one behind)
DONE_FILE = "done.json"  # a study's record of a finished run (study/runs.py), which names its checkpoint


def claim_out_dir(out_dir: str, stack: contextlib.ExitStack, *, resume: bool, overwrite: bool,
                  claim: bool = True) -> None:
    """Make out_dir this training's: lock it (released when stack closes), refuse to start a new run over an
    old one unless resume or overwrite, and remove what a killed save left. claim=False (eval_only, ranks other
    than 0) only checks that out_dir is not a file."""
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"out_dir={out_dir!r} is a file, not a folder; choose another --out_dir")
    if not claim:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        link = next((p for p in (folder, *folder.parents) if p.is_symlink() and not p.exists()), None)
        if link is not None:  # mkdir said only "File exists"
            raise UserError(f"cannot create out_dir={out_dir!r}: {link} is a dangling symbolic link (to "
                            f"{os.readlink(link)}, which does not exist); create its target, remove the link, or "
                            "choose another --out_dir") from None
        raise UserError(f"cannot create out_dir={out_dir!r}: {e.strerror}") from None
    if not os.access(folder, os.W_OK):  # a read-only folder or file system: no checkpoint could be saved
        raise UserError(f"out_dir={out_dir!r} cannot be written (read-only), so no checkpoint could be saved; "
                        "copy the run to a folder you can write and give that --out_dir")
    lock_folder(folder, stack)
    existing = [name for name in RUN_FILES if (folder / name).exists()]
    if existing and not resume and not overwrite:
        raise UserError(f"out_dir={out_dir!r} already holds a run ({', '.join(existing)}); continue it with "
                        "--init_from=resume, replace it with --overwrite=True, or choose another --out_dir")
    for stale in remove_stale_temps(folder, CHECKPOINT_FILES):
        print(f"removed {stale}, left by an interrupted save")


class MetricsLog:
    """metrics.jsonl (rank 0, unless eval_only) and wandb. A new run's first record replaces an old log, so a
    start-up failure (wandb, a bad option) leaves the old one whole; a resumed run appends."""

    def __init__(self, path: Path | None, append: bool, wandb_run=None):
        self.path, self.mode, self.wandb_run = path, "a" if append else "w", wandb_run

    def write(self, record: dict) -> None:
        if self.path is not None:
            try:
                with self.path.open(self.mode) as file:
                    file.write(json.dumps(record) + "\n")
            except OSError as e:  # a full disk: stop with the checkpoints as they are
                raise UserError(f"could not write {self.path}: {e.strerror or e}") from None
            self.mode = "a"
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "iter"}, step=record["iter"])

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


def start_wandb(out_dir: str, project: str, name: str, mode: str, settings: dict):
    """A wandb run logging into out_dir with every setting; what keeps it from starting is a UserError."""
    import wandb

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    try:
        return wandb.init(project=project, name=name, mode=mode, dir=str(out_dir), config=settings)
    except Exception as e:  # wandb reports a missing login or network in many types of its own
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"wandb could not start ({type(e).__name__}: {message}); run `wandb login`, or use "
                        "--wandb_mode=offline (no login needed) or --wandb_log=False") from None


class Interrupted(BaseException):
    """Raised by StopRequest's handler inside StopRequest.interruptible(): a BaseException, so that no `except
    Exception` in torch's compiler swallows it."""


def abort(signum: int, left: str = "the checkpoints are the last ones saved whole") -> None:
    """End the process now, with one line and the signal's exit status (130, 143). os._exit, not an exception:
    one raised inside torch.save or compiled code comes out as their RuntimeError's traceback, or waits for
    cleanup. What it leaves is safe: a save in progress is a temporary file (removed at the next start), the
    checkpoints are the last ones saved whole, and the lock goes with the process."""
    print(f"aborted by a second {signal.Signals(signum).name}: {left}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):  # os._exit flushes nothing: the lines printed so far go first
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(128 + signum)


class StopRequest:
    """Turns the first Ctrl-C or SIGTERM into a request to save and stop at the end of the step; a second one
    aborts at once (abort). `signal` is the number of the first, or 0.

    Inside interruptible() (an evaluation, the forward and backward passes that compile), the first signal
    raises Interrupted at once instead: work that may take minutes is abandoned, not waited for. defer() ends
    that for the rest of the block (the optimizer step has begun: it must finish). A long loop inside the block
    calls poll() between its pieces: the handler's raise is lost where it lands in a finalizer or a weakref callback
    (torch.compile keeps many; Python reports it through sys.unraisablehook and goes on), and poll() raises it again.
    That report of our own Interrupted is no fault, and no traceback: unraisable() keeps it quiet.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, left: str = "the checkpoints are the last ones saved whole"):
        self.left = left  # what a second signal's abort leaves, said in its line (score.py: nothing scored)
        self.signal = 0
        self.previous = {}
        self.raise_now = False  # in an interruptible block, not deferred: a signal raises Interrupted
        self.previous_unraisable = sys.unraisablehook

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = {number: signal.signal(number, self.handle) for number in self.SIGNALS}
            self.previous_unraisable, sys.unraisablehook = sys.unraisablehook, self.unraisable
        return self

    def unraisable(self, report) -> None:
        """Python's report of an exception it could not raise (in a finalizer, a weakref callback): said as before,
        unless it is the handler's Interrupted, which poll() raises again."""
        if not issubclass(report.exc_type, Interrupted):
            self.previous_unraisable(report)

    def reader_gone(self) -> None:
        """stdout's reader has gone (train.py | head): save and stop at the end of the step, as for SIGTERM, with
        SIGPIPE's status; whatever is still printed goes nowhere."""
        silence_stdout()
        self.signal = self.signal or signal.SIGPIPE

    def handle(self, signum, frame):
        if self.signal:
            abort(signum, self.left)
        self.signal = signum
        if self.raise_now:  # left set: poll() raises again where this raise is lost
            raise Interrupted(signum)

    @contextlib.contextmanager
    def interruptible(self, allowed: bool = True):
        """A block that a signal interrupts (Interrupted), unless allowed is False or a signal came already."""
        if self.signal and allowed:
            raise Interrupted(self.signal)
        self.raise_now = allowed
        try:
            yield
        finally:
            self.raise_now = False

    def defer(self, *args) -> None:
        """From here to the end of the interruptible block, a signal waits for the block to end."""
        self.raise_now = False

    def poll(self) -> None:
        """Inside an interruptible block that a signal has reached: raise Interrupted (again, if its handler's
        raise was lost)."""
        if self.raise_now and self.signal:
            raise Interrupted(self.signal)

    def __exit__(self, *exc):
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        if self.previous:
            sys.unraisablehook = self.previous_unraisable
