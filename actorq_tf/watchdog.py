"""Bounds every wait on the Reverb server, including the ones without a timeout.

While the server is down, Reverb's sample, insert and variable-container
calls wait for it to come back and have no timeout of their own (seen with
dm-reverb 0.14: they complete once a restarted server answers). A role's
loop beats a ProgressWatchdog whenever it gets anywhere; if no beat comes
for `give_up_s`, the watchdog names what the role was waiting for and ends
the process with exit code 1, so that nothing hangs for good and the local
launcher can restart the role.
"""
import os
import sys
import threading
import time

from absl import logging


class ProgressWatchdog:
  """Ends the process when `beat` has not been called for `give_up_s`."""

  def __init__(self, give_up_s: float, what: str, check_interval_s: float = 1.0):
    self._give_up_s = give_up_s
    self._what = what
    self._last_beat = time.monotonic()
    self._stopped = threading.Event()
    self._check_interval_s = min(check_interval_s, give_up_s / 4)
    threading.Thread(target=self._watch, name='ProgressWatchdog',
                     daemon=True).start()

  def beat(self) -> None:
    self._last_beat = time.monotonic()

  def stop(self) -> None:
    self._stopped.set()

  def _watch(self) -> None:
    while not self._stopped.wait(self._check_interval_s):
      idle_s = time.monotonic() - self._last_beat
      if idle_s > self._give_up_s:
        message = (f'no progress for {idle_s:.0f} s while {self._what}; '
                   'giving up')
        logging.error(message)
        logging.flush()
        print(f'{os.path.basename(sys.argv[0])}: error: {message}',
              file=sys.stderr, flush=True)
        os._exit(1)  # pylint: disable=protected-access
