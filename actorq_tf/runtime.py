"""What every role process shares: stopping, bounded waits, and exiting.

One cause lies behind all of it. dm-reverb 0.14's sample, insert and
variable-container calls have no timeout of their own: while the server is
down they wait for it to come back, and at shutdown their C++ threads and
destructors can block for good (seen: a learner's main thread inside
replay sampling after SIGTERM, learners stuck at interpreter exit after
their final checkpoint). So a role:
  - gets its stop event from SIGTERM and SIGINT through a wakeup fd, which
    the C-level handler writes at once even while the main thread is held
    in C++ (Python runs signal handlers on the main thread only);
  - beats a watchdog wherever it gets anywhere; no beat for
    `server_timeout_s` ends the process with code 1 and a line naming what
    it waited for, so that the launcher can restart it;
  - may name what to do when, after the stop, its loop does not come back
    within a grace period (the learner checkpoints; its weights do not
    change while it waits);
  - hands Reverb objects whose destructors may block to a daemon thread;
  - leaves through `exit_process`, on success and on error alike, never
    through interpreter shutdown.
"""
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List

from absl import logging
import gin


_DUPLICATE_REGISTRATION = (
    r'Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register '
    r'factory for plugin cu(DNN|FFT|BLAS) when one has already been '
    r'registered')


def import_tensorflow() -> None:
  """Imports TensorFlow without the three ERROR lines its 2.15 wheels log at
  every import, GPU or not: the cuDNN, cuFFT and cuBLAS factories registered
  twice (tensorflow/tensorflow#62075), the first thing every command printed.

  While TensorFlow loads, stderr goes through a filter process that drops
  those lines and passes on everything else as it comes; being a process of
  its own, it still passes on what a fatal abort in the import printed.
  Binaries call this before importing the modules that need TensorFlow;
  modules that do not (Ray's role hosts) never load it.
  """
  if 'tensorflow' in sys.modules:
    return
  stderr = line_filter = None
  try:
    sys.stderr.flush()
    stderr = os.dup(2)
    line_filter = subprocess.Popen(
        [sys.executable, '-c', _LINE_FILTER, _DUPLICATE_REGISTRATION],
        stdin=subprocess.PIPE, stdout=stderr)
    os.dup2(line_filter.stdin.fileno(), 2)
  except (AttributeError, OSError):
    pass  # No stderr to keep quiet, or no filter: TensorFlow prints as usual.
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    if stderr is not None:
      os.dup2(stderr, 2)
      os.close(stderr)
    if line_filter is not None:
      line_filter.stdin.close()
      try:
        line_filter.wait(timeout=10)
      except subprocess.TimeoutExpired:
        pass  # Something TensorFlow started holds the pipe; the filter
        # ends with it.


@contextlib.contextmanager
def quiet_native_output():
  """Sends what the process prints to stdout and stderr, C++ included, to
  nowhere while in the block: the TFLite converter prints pages of MLIR
  summaries per call, which a launch's trial conversion must not show (its
  failures reach the user as ActorQErrors)."""
  sys.stdout.flush()
  sys.stderr.flush()
  saved = [os.dup(1), os.dup(2)]
  with open(os.devnull, 'wb') as devnull:
    os.dup2(devnull.fileno(), 1)
    os.dup2(devnull.fileno(), 2)
  try:
    yield
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, copy in zip((1, 2), saved):
      os.dup2(copy, fd)
      os.close(copy)


@gin.configurable
def tensorflow_threads(intra_op: int = 0, inter_op: int = 0) -> None:
  """Sizes this process's TensorFlow thread pools; 0 keeps TensorFlow's
  default (one thread per core).

  The small networks' ops take microseconds, and splitting them over
  threads costs more than it saves while the learner shares its cores with
  the Reverb server, the actors and the evaluator. Binaries call this after
  parsing gin and before TensorFlow runs an op.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(intra_op)
  tf.config.threading.set_inter_op_parallelism_threads(inter_op)


_LINE_FILTER = """
import re, sys
pattern = re.compile(sys.argv[1].encode())
for line in sys.stdin.buffer:
  if not pattern.search(line):
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""

# How long the Reverb server may not answer before a role gives up
# (`run_actor.`, `train.`, `run_evaluator.server_timeout_s` default to it).
SERVER_TIMEOUT_S = 120.0


def stop_on_signals() -> threading.Event:
  """An event that SIGTERM and SIGINT set, for a clean shutdown."""
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd)

  def set_on_wakeup():
    os.read(read_fd, 1)
    stop.set()

  threading.Thread(target=set_on_wakeup, name='StopOnSignal',
                   daemon=True).start()
  return stop


def exit_process(code: int) -> None:
  """Flushes logs and output, then ends the process without interpreter
  shutdown, whose C++ destructors can block."""
  logging.flush()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


def give_up(message: str, code: int) -> None:
  """Logs `message`, prints it as the role's error line, and exits."""
  logging.error(message)
  print(f'{os.path.basename(sys.argv[0])}: error: {message}',
        file=sys.stderr, flush=True)
  exit_process(code)


class Watchdog:
  """Ends the process when `beat` has not been called for `give_up_s`.

  Stop it before its owner returns: it must not outlive a role that ran in
  the caller's process (benchmarks, tests).
  """

  def __init__(self, give_up_s: float, what: str,
               check_interval_s: float = 1.0):
    self._give_up_s = give_up_s
    self._what = what
    self._last_beat = time.monotonic()
    self._stopped = threading.Event()
    self._check_interval_s = min(check_interval_s, give_up_s / 4)
    threading.Thread(target=self._watch, name='Watchdog', daemon=True).start()

  def beat(self) -> None:
    self._last_beat = time.monotonic()

  def stop(self) -> None:
    self._stopped.set()

  def _watch(self) -> None:
    while not self._stopped.wait(self._check_interval_s):
      idle_s = time.monotonic() - self._last_beat
      if idle_s > self._give_up_s:
        give_up(f'no progress for {idle_s:.0f} s while {self._what}; '
                 'giving up', 1)


def finish_if_stuck(stop: threading.Event, finished: threading.Event,
                    step_lock: threading.Lock, finish: Callable[[], None],
                    grace_s: float) -> None:
  """Starts a thread that finishes the role if, `grace_s` after `stop`,
  its loop has not set `finished`: it takes `step_lock` (what the loop
  holds while its state changes), calls `finish` and exits with 0. A loop
  still holding the lock after another `grace_s` is inside a change of
  state: the process exits with 1 and keeps its last periodic save."""

  def watch():
    stop.wait()
    if finished.wait(grace_s):
      return
    if not step_lock.acquire(timeout=grace_s):
      give_up(f'still changing or reading its state {2 * grace_s:.0f} s '
               'after the stop; exiting without a final save', 1)
    try:
      if finished.is_set():
        return
      logging.warning('The loop is still blocked %.0f s after the stop; '
                      'finishing from the watchdog.', grace_s)
      finish()
      exit_process(0)
    finally:
      step_lock.release()

  threading.Thread(target=watch, name='FinishIfStuck', daemon=True).start()


def release_off_thread(holder: List[object]) -> None:
  """Drops what `holder` holds on a daemon thread. The caller keeps no other
  reference: the object's destructor (a Reverb dataset iterator's waits for
  the samples in flight, which a rate limiter can hold for good) then runs
  off the caller's thread."""
  handed = queue.SimpleQueue()
  handed.put(holder.pop())
  threading.Thread(target=handed.get, name='Release', daemon=True).start()
