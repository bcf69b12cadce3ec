"""Where a run's roles run, and how the launcher sees them.

The launcher starts each role (learner and Reverb server, evaluator, actors)
through a placement and reads their figures back through it: status files,
evaluation results and kept versions live on the machine of the role that
wrote them. `Machine` runs every role as a process of this machine and reads
the run directory directly; `ray_cluster.RayCluster` places them on the nodes
of a Ray cluster and reads through Ray. A role handle (`RoleProcess` here)
answers exit_code, restart, kill, terminate, wait and log_tail.

This module stays free of TensorFlow: Ray workers that host roles import it.
"""
import ctypes
import functools
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import portpicker

from actorq_tf import run_directory

_PR_SET_PDEATHSIG = 1
# Looked up here, not in the forked child, where loading a library could
# wait on a lock that another thread of this process held at the fork.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent(parent_pid: int) -> None:
  # Runs in the child before exec: a role whose host process dies (a Ray
  # worker lost with its node, a launcher killed with -9) stops too, rather
  # than go on beside its replacement.
  _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
  if os.getppid() != parent_pid:  # It died before the line above.
    os.kill(os.getpid(), signal.SIGTERM)


class RoleProcess:
  """One role's subprocess, its output in a log file."""

  def __init__(self, name: str, module: str, args: Sequence[str],
               log_dir: str, environment: Optional[Dict[str, str]] = None):
    self.name = name
    # Added to the launcher's own environment (the run key, which must not
    # show in the command line).
    self._environment = dict(environment or {})
    self.log_path = os.path.join(log_dir, f'{name}.log')
    self.restarts = 0
    self._command = [sys.executable, '-m', module, *args]
    os.makedirs(log_dir, exist_ok=True)
    self._start()

  def _start(self) -> None:
    env = dict(os.environ, **self._environment)
    env['PYTHONPATH'] = run_directory.roles_python_path()
    with open(self.log_path, 'ab') as log:
      # A session of its own: Ctrl-C reaches only the launcher, which then
      # stops the roles in order.
      self.process = subprocess.Popen(
          self._command, stdout=log, stderr=subprocess.STDOUT,
          stdin=subprocess.DEVNULL, env=env, cwd=run_directory.PROJECT_ROOT,
          start_new_session=True,
          preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    self.started = time.monotonic()

  def restart(self) -> None:
    self.restarts += 1
    self._start()

  def uptime_s(self) -> float:
    return time.monotonic() - self.started

  def exit_code(self) -> Optional[int]:
    return self.process.poll()

  def kill(self) -> None:
    self.process.kill()
    self.process.wait()

  def terminate(self) -> None:
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGTERM)

  def wait(self, timeout_s: float) -> None:
    try:
      self.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()

  def log_tail(self, lines: int = 8) -> str:
    try:
      with open(self.log_path, errors='replace') as f:
        kept = [l.rstrip() for l in f if l.strip()]
      return '\n'.join(kept[-lines:])
    except FileNotFoundError:
      return ''


class Machine:
  """Every role a process of this machine; one run directory for all."""

  def __init__(self, root_dir: str):
    self.root_dir = root_dir
    self._log_dir = os.path.join(root_dir, run_directory.LOGS_DIR)

  def describe(self) -> str:
    return f'this machine (logs in {self._log_dir})'

  def start_server(self, name: str, module: str, args: List[str],
                   environment: Dict[str, str]) -> Tuple[RoleProcess, str]:
    """The role that hosts the Reverb server, and the address its clients
    reach it at."""
    port = portpicker.pick_unused_port()
    server = RoleProcess(name, module, args + ['--replay_port', str(port)],
                         self._log_dir, environment)
    return server, f'localhost:{port}'

  def start_role(self, name: str, module: str, args: List[str],
                 environment: Dict[str, str]) -> RoleProcess:
    """A role with `environment` added to this process's own."""
    return RoleProcess(name, module, args, self._log_dir, environment)

  def read_status(self, role: str) -> Optional[Dict]:
    return run_directory.read_status(self.root_dir, role)

  def read_results(self) -> List[Dict]:
    return run_directory.read_results(self.root_dir)

  def keep_version(self, version: int, name: str) -> None:
    run_directory.keep_version(self.root_dir, version, name)

  def read_kept_evaluation(self, name: str) -> Optional[Dict]:
    return run_directory.read_kept_evaluation(self.root_dir, name)

  def summary(self) -> Dict:
    """What the run's summary records about where the roles ran."""
    return {}
