"""Supervision of a run's roles: restarts and when to refuse them, the
refusal watch, chaos kills, waiting for the replay server, the budgets, and
stopping roles in order."""
import random
import signal
import time
from typing import TYPE_CHECKING, Dict, List, Optional

from actorq_tf import model_channel
from actorq_tf import records
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf.errors import ActorQError

if TYPE_CHECKING:
  from actorq_tf.launcher import RunSettings


class Interrupted:
  def __init__(self):
    self.signal_name = None
    for signum in (signal.SIGINT, signal.SIGTERM):
      signal.signal(signum, self._handle)

  def _handle(self, signum, _):
    self.signal_name = signal.Signals(signum).name


def over_budget(max_env_steps: int, max_wall_time_s: float, env_steps: int,
                elapsed_s: float) -> Optional[str]:
  """The budget that ran out ('max_env_steps' or 'max_wall_time'), if any;
  a budget of 0 is none."""
  if max_env_steps and env_steps >= max_env_steps:
    return 'max_env_steps'
  if max_wall_time_s and elapsed_s >= max_wall_time_s:
    return 'max_wall_time'
  return None


def restart_refusal(settings: 'RunSettings', restarts: int, exit_code: int,
                    uptime_s: float, killed_by_chaos: bool) -> Optional[str]:
  """Why a role that exited with `exit_code` must not be restarted, or None
  to restart it. A role ended by a signal (negative code: kill -9, the OOM
  killer) or by chaos is restarted however soon it died; one that failed
  soon after its start has a set-up error that a restart would repeat.
  `restarts` counts the role's earlier restarts that chaos did not cause:
  fault injection never uses up a role's restarts."""
  if not settings.restart_failed_roles:
    return 'restarts are off'
  if killed_by_chaos:
    return None
  if restarts >= settings.max_role_restarts:
    return f'it was restarted {restarts} times already'
  if (exit_code > 0 and not killed_by_chaos and
      uptime_s < settings.min_uptime_for_restart_s):
    return f'it failed {uptime_s:.0f} s after its start'
  return None


def restart_or_fail(role, settings: 'RunSettings', killed_by_chaos: bool,
                    own_restarts: int, log) -> None:
  """Restarts a role that exited, or raises if it should not be;
  `own_restarts`: its earlier restarts that chaos did not cause."""
  code = role.exit_code()
  why = restart_refusal(settings, own_restarts, code, role.uptime_s(),
                        killed_by_chaos)
  if why:
    raise ActorQError(
        f'role {role.name} exited with code {code} ({why}); last lines of '
        f'{role.log_path}:\n{role.log_tail()}')
  log(f'Role {role.name} exited with code {code}; restarting it ' + (
      '(a chaos kill: not counted against its restarts).' if killed_by_chaos
      else f'(restart {own_restarts + 1} of at most '
      f'{settings.max_role_restarts}).'))
  role.restart()


def wait_for_role_server(server, address: str,
                         interrupted: Interrupted,
                         timeout_s: float = runtime.SERVER_TIMEOUT_S
                        ) -> None:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline and not interrupted.signal_name:
    if server.exit_code() is not None:
      raise ActorQError(
          f'{server.name}, the Reverb server\'s host, exited with code '
          f'{server.exit_code()}; last lines of {server.log_path}:\n'
          f'{server.log_tail()}')
    try:
      model_channel.wait_for_server(address, timeout_s=1)
      return
    except ActorQError:
      pass
  raise ActorQError(f'the Reverb server did not start at {address}')


class RefusalWatch:
  """Fails the run when a role that pulls models (an actor, the evaluator)
  keeps refusing them: `max_versions` in a row, or every one for
  `max_seconds` while it has no model at all; or when the learner has
  refused `max_replay_items` replay items in a row. Status files written
  before `since` (an earlier launch of a resumed run) do not count."""

  def __init__(self, max_versions: int, max_seconds: float,
               max_replay_items: int, since: float):
    self._max_versions = max_versions
    self._max_seconds = max_seconds
    self._max_replay_items = max_replay_items
    self._since = since

  def check(self, pullers: Dict[str, records.PullerStatus],
            learner: records.LearnerStatus) -> None:
    in_a_row = learner.replay_items_refused_in_a_row
    if in_a_row >= self._max_replay_items and learner.time >= self._since:
      raise ActorQError(
          f'the learner refused the last {in_a_row:,} replay items it read '
          f'({learner.last_replay_refusal}); the run stops rather '
          'than train on nothing. Do all actors have the run key?')
    for name, status in pullers.items():
      refused = status.consecutive_refusals
      if not refused or status.time < self._since:
        continue
      seconds = time.time() - (status.refusing_since or time.time())
      random_actions = not status.model_version
      if refused >= self._max_versions or (
          random_actions and seconds >= self._max_seconds):
        raise ActorQError(
            f'{name} refused {refused} model version(s) in a row, '
            f'the first {seconds:.0f} s ago, and acts with model version '
            f'{status.model_version} (0: none); the run '
            'stops rather than train on that. Last refusal: '
            f'{status.last_refusal}')


def chaos_victim(chaos: random.Random, roles: List):
  """A random kind of role (server, learner, evaluator, actor), then a
  random role of it: with many actors, the few roles they rely on are hit
  as often as the actors are."""
  kinds = {}
  for role in roles:
    kinds.setdefault('actor' if role.name.startswith('actor_') else role.name,
                     []).append(role)
  return chaos.choice(kinds[chaos.choice(sorted(kinds))])


def stop_roles(roles: List, grace_s: float) -> None:
  """Actors and evaluator first, then the learner, then the server."""
  order = ([r for r in roles if r.name.startswith('actor') or
            r.name == run_directory.EVALUATOR_ROLE],
           [r for r in roles if r.name == run_directory.LEARNER_ROLE],
           [r for r in roles if r.name == run_directory.SERVER_ROLE])
  for group in order:
    for role in group:
      role.terminate()
    deadline = time.monotonic() + grace_s
    for role in group:
      role.wait(max(0.1, deadline - time.monotonic()))
