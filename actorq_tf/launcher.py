"""Runs a whole ActorQ training: one process per role.

Starts the learner (which hosts the Reverb server unless it is a role of
its own), the evaluator and N actors as processes of this machine (or of a
cluster's nodes, see `placement`), each logging to
`root_dir/logs/<role>.log`; prints progress, restarts a role that dies (the
learner and server from their checkpoints),
stops at the target return or a budget, shuts every role down in order, and
writes `summary.json` last, so a run directory with a summary is finished.
A run directory without a summary is resumed by the same command.
"""
import collections
import dataclasses
import functools
import json
import os
import random
import signal
import time
from typing import Dict, List, Optional, Sequence, Tuple

import gin
import numpy as np

from actorq_tf import config
from actorq_tf import energy
from actorq_tf import evaluation
from actorq_tf import metrics
from actorq_tf import model_channel
from actorq_tf import placement
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf import signing
from actorq_tf.errors import ActorQError


@dataclasses.dataclass
class RunSettings:
  root_dir: str
  gin_files: Sequence[str]
  gin_bindings: Sequence[str]
  actor_precision: str
  num_actors: int
  seed: int
  max_env_steps: int
  max_wall_time_s: float
  progress_interval_s: float = 10.0
  shutdown_grace_s: float = 30.0
  restart_failed_roles: bool = True
  max_role_restarts: int = 10
  # A role that exits with an error sooner after its start is taken for a
  # set-up error (bad config, missing file) that a restart would repeat.
  # Roles ended by a signal (kill -9, the OOM killer) are always restarted.
  min_uptime_for_restart_s: float = 20.0
  # Fault injection: SIGKILL a random role this often (0: never).
  chaos_kill_interval_s: float = 0.0
  # Country whose grid carbon intensity applies to the machine's measured
  # energy; None measures nothing.
  energy_country: Optional[str] = 'USA'
  # Train on this long after the target is met, to see whether the policy
  # holds (`post_target_returns` in the summary).
  continue_after_target_s: float = 0.0


def _target_metric(precision: str) -> str:
  # int8 actors are judged by the int8 model they run; the other precisions
  # run (a close copy of) the fp32 network.
  return 'return_int8' if precision == 'int8' else 'return_fp32'


class _ResultKeeper:
  """Applies the stopping rule to each evaluation as it comes, and keeps
  (in `models/target/` and `models/best/`, where the evaluator runs) the
  evaluated versions that met it and that scored best: their int8 model,
  fp32 weights and checkpoint, and evaluation."""

  def __init__(self, root_dir: str, rule: evaluation.StoppingRule,
               roles_placement, log):
    self._root_dir = root_dir
    self.rule = rule
    self._placement = roles_placement
    self._log = log
    self.best: Optional[Dict] = None
    self.target: Optional[Dict] = None
    self.post_target: List[Dict] = []

  def recall_best(self) -> None:
    """Takes up what an earlier launch of a resumed run kept as its best
    (read where the evaluator runs, once it does)."""
    self.best = self._placement.read_kept_evaluation('best')

  def add_after_stop(self, result: Dict) -> None:
    """An evaluation that ended after the run stopped: it may be the best,
    but it neither meets the rule nor follows the target."""
    self._keep_if_best(result)

  def _keep_if_best(self, result: Dict) -> None:
    metric = self.rule.metric
    if self.best is None or result[metric] > self.best[metric]:
      if self._keep(result, 'best'):
        self.best = result

  def add(self, result: Dict) -> bool:
    """Takes the next evaluation; True when it completes the rule."""
    self._keep_if_best(result)
    if self.target is not None:
      self.post_target.append(result)
      return False
    if not self.rule.met_by(result) or not self._keep(result, 'target'):
      return False
    self.target = result
    return True

  def model_path(self, name: str) -> str:
    return run_directory.kept_model_path(self._root_dir, name)

  def _keep(self, result: Dict, name: str) -> bool:
    try:
      self._placement.keep_version(result['version'], name)
    except OSError as e:
      self._log(f'WARNING: could not keep evaluated version '
                f'{result["version"]} as the {name} model ({e}).')
      return False
    return True


def _evaluation_summary(result: Optional[Dict]) -> Optional[Dict]:
  if result is None:
    return None
  return {'version': result['version'],
          'return_int8': result['return_int8'],
          'return_fp32': result['return_fp32'],
          'time': result.get('time'),
          'episodes': len(result['returns_int8'])}


class _Interrupted:
  def __init__(self):
    self.signal_name = None
    for signum in (signal.SIGINT, signal.SIGTERM):
      signal.signal(signum, self._handle)

  def _handle(self, signum, _):
    self.signal_name = signal.Signals(signum).name


@gin.configurable
def run_local(settings: RunSettings,
              target_return: float = gin.REQUIRED,
              target_evaluations_in_a_row: int = 2,
              max_refused_versions: int = 3,
              max_refusing_s: float = 600.0,
              max_refused_replay_items: int = 10_000,
              replay_in_learner: bool = True,
              roles_on=None,
              log=functools.partial(print, flush=True)) -> Dict:
  """Trains until the target, a budget, a failure or Ctrl-C; returns summary.

  Args:
    settings: what to run and where.
    target_return: mean greedy eval return (over the evaluator's
      `num_episodes`) that ends the run...
    target_evaluations_in_a_row: ... when this many evaluations in a row,
      each of a newer version, reach it (see evaluation.StoppingRule).
    max_refused_versions: the run fails when an actor has refused this many
      published versions in a row: it would go on training on random
      actions.
    max_refusing_s: ... or when an actor without any model has refused
      every version for this many seconds.
    max_refused_replay_items: ... or when the learner has refused this many
      replay items in a row (their signatures do not verify with the run
      key): it would train on nothing.
    replay_in_learner: the learner's process hosts the Reverb server and
      samples from it without gRPC (on 2 cores, 220 train steps/s in a
      CartPole-v1 run against 192 from a server process); it restarts with
      its replay checkpoint. False: the server is a role of its own, which
      outlives a learner that dies.
    roles_on: where the roles run (see `placement`); None: processes of
      this machine. The caller releases a cluster's resources after the
      call.
    log: where progress lines go.
  """
  root_dir = settings.root_dir
  # Before anything is written: bad settings must leave no run directory.
  rule = evaluation.StoppingRule(
      _target_metric(settings.actor_precision), target_return,
      target_evaluations_in_a_row,
      config.bound_parameter(evaluation.run_evaluator, 'num_episodes'))
  meter = (energy.EnergyMeter(settings.energy_country)
           if settings.energy_country else None)
  resumed = os.path.exists(
      os.path.join(root_dir, run_directory.RUN_IDENTITY_FILE))
  earlier_launches = run_directory.claim(root_dir, {
      'gin_config': gin.config_str(),
      'actor_precision': settings.actor_precision,
      'seed': settings.seed})
  roles_on = roles_on or placement.Machine(root_dir)
  # Every role gets the run key through its environment: no role needs the
  # run directory of this machine to check what the learner signed.
  role_environment = signing.run_key(root_dir).environment()

  interrupted = _Interrupted()
  common_args = ['--root_dir', root_dir, '--seed', str(settings.seed)]
  for gin_file in settings.gin_files:
    common_args += ['--gin_file', gin_file]
  for binding in settings.gin_bindings:
    common_args += ['--gin_bindings', binding]

  keeper = _ResultKeeper(root_dir, rule, roles_on, log)
  if meter:
    meter.start()
  energy_writer = meter and metrics.summary_writer(root_dir, 'energy')
  clock = _Clock(time.monotonic(), time.time())
  roles = []
  summary = {
      'precision': settings.actor_precision,
      'target_return': target_return,
      'target_metric': _target_metric(settings.actor_precision),
      'stopping_rule': rule.description(),
      'target_reached': False,
      'time_to_target_s': None,
      'env_steps_to_target': None,
      'train_steps_to_target': None,
      'num_actors': settings.num_actors,
      'seed': settings.seed,
      'code_version': run_directory.code_version(),
      'start_time': clock.wall_time,
      'gin_files': list(settings.gin_files),
      'gin_bindings': list(settings.gin_bindings),
      'resumed': resumed,
      'earlier_launches': earlier_launches,
      'chaos_kills': [],
  }
  seen_results = 0
  # How long each look at the roles took (statuses, results, restarts),
  # sleep excluded: what many roles cost the launcher.
  look_seconds = []
  outcome = _Outcome('failed')
  try:
    learner_args = common_args + _learner_args(settings)
    server, address = roles_on.start_server(
        *(run_directory.LEARNER_ROLE, LEARNER_MODULE, learner_args)
        if replay_in_learner else
        (run_directory.SERVER_ROLE, SERVER_MODULE,
         common_args), role_environment)
    roles.append(server)
    if not replay_in_learner:
      roles.append(roles_on.start_role(
          run_directory.LEARNER_ROLE, LEARNER_MODULE,
          learner_args + ['--replay_server_address', address],
          role_environment))
    summary['replay_server_address'] = address
    # The clients wait for the server themselves: starting them now
    # overlaps their start-up (TensorFlow's import) with the server's.
    _start_clients(settings, roles_on, common_args + [
        '--replay_server_address', address], role_environment, roles)
    # Results of an earlier launch of a resumed run do not end this one
    # (read where the evaluator runs, once it does, before it has a model
    # to evaluate).
    seen_results = len(roles_on.read_results())
    keeper.recall_best()
    _wait_for_role_server(server, address, interrupted)
    log(f'{"Resuming" if resumed else "Run"} directory {root_dir}: Reverb '
        f'at {address} (in the {server.name} process), learner, evaluator '
        f'and {settings.num_actors} {settings.actor_precision} actor(s) on '
        f'{roles_on.describe()}')
    status, seen_results = _monitor(
        settings, roles_on, roles, keeper, interrupted, clock, summary,
        seen_results,
        _RefusalWatch(max_refused_versions, max_refusing_s,
                      max_refused_replay_items, clock.wall_time),
        look_seconds, meter, energy_writer, log)
    outcome = _Outcome(status)
  except ActorQError as e:
    outcome = _Outcome('failed', e.message)
  finally:
    log(f'Stopping ({"a role failed" if outcome.error else outcome.status}).')
    _stop_roles(roles, settings.shutdown_grace_s)

  _summarize(summary, outcome, settings, roles_on, roles, keeper, clock,
             seen_results, look_seconds)
  if meter:
    reading = meter.stop()
    metrics.write_energy(energy_writer, reading,
                         int(time.monotonic() - clock.start))
    energy_writer.close()
    summary.update(reading.as_summary())
  try:
    run_directory.write_json_atomically(
        os.path.join(root_dir, run_directory.SUMMARY_FILE), summary)
  except OSError as e:
    # Without its summary the directory stays resumable, as it should.
    log(json.dumps(summary, indent=1))
    raise ActorQError(
        f'could not write {run_directory.SUMMARY_FILE} into {root_dir} '
        f'({e.strerror}); the run stopped as {outcome.status!r}'
        f'{": " + outcome.error if outcome.error else ""}; its summary is '
        'above') from e
  if outcome.error is not None:
    raise ActorQError(outcome.error)
  return summary


@dataclasses.dataclass(frozen=True)
class _Clock:
  start: float  # time.monotonic()
  wall_time: float  # time.time() at the same moment


@dataclasses.dataclass(frozen=True)
class _Outcome:
  """How a run ended: its status ('target_reached', a budget's name,
  'interrupted (SIGINT)', 'failed') and, if a role failed, why."""
  status: str
  error: Optional[str] = None


SERVER_MODULE, LEARNER_MODULE, EVALUATOR_MODULE, ACTOR_MODULE = (
    f'{run_directory.BINARIES}.{name}_main'
    for name in ('reverb_server', 'learner', 'eval', 'actor'))


def _learner_args(settings: RunSettings) -> List[str]:
  # The launcher measures its machine, which holds the learner unless the
  # roles run on a cluster.
  return ['--actor_precision', settings.actor_precision, '--notrack_energy']


def _start_clients(settings: RunSettings, roles_on, client_args: List[str],
                   environment: Dict[str, str], roles: List) -> None:
  """Adds the evaluator and the actors to `roles`, each as it starts, so
  that a failed start leaves none unstopped."""
  roles.append(roles_on.start_role(run_directory.EVALUATOR_ROLE,
                                   EVALUATOR_MODULE, client_args,
                                   environment))
  for i in range(settings.num_actors):
    roles.append(roles_on.start_role(
        run_directory.actor_role(i), ACTOR_MODULE,
        client_args + ['--actor_precision', settings.actor_precision,
                       '--actor_index', str(i),
                       '--num_actors', str(settings.num_actors)],
        environment))


def _monitor(settings: RunSettings, roles_on, roles: List,
             keeper: '_ResultKeeper', interrupted: _Interrupted,
             clock: _Clock, summary: Dict, seen_results: int,
             refusals: '_RefusalWatch', look_seconds: List[float], meter,
             energy_writer, log) -> Tuple[str, int]:
  """Watches the running roles until the run ends; returns its status and
  how many evaluation results it has taken.

  Restarts roles that exit (or raises ActorQError when one must not be),
  injects chaos kills, applies the stopping rule to each new evaluation
  (target figures go into `summary`), and prints progress.
  """
  root_dir = settings.root_dir
  next_progress = time.monotonic() + settings.progress_interval_s
  target_time = None
  chaos = random.Random(settings.seed)
  next_chaos_kill = clock.start + (settings.chaos_kill_interval_s or
                                   float('inf'))
  chaos_killed = set()
  chaos_restarts = collections.Counter()  # Restarts that chaos caused.
  while True:
    time.sleep(0.5)
    look_start = time.monotonic()
    for role in roles:
      if role.exit_code() is not None:
        killed_by_chaos = role.name in chaos_killed
        _restart_or_fail(role, settings, killed_by_chaos,
                         role.restarts - chaos_restarts[role.name], log)
        if killed_by_chaos:
          chaos_restarts[role.name] += 1
        chaos_killed.discard(role.name)
    # Never a role whose restart is still to come, and after a slow look at
    # the roles (Ray under load) one kill, not those the wait skipped.
    running = [role for role in roles if role.name not in chaos_killed]
    if time.monotonic() >= next_chaos_kill and running:
      victim = _chaos_victim(chaos, running)
      log(f'Chaos: killing {victim.name} (SIGKILL).')
      victim.kill()
      chaos_killed.add(victim.name)
      summary['chaos_kills'].append(
          [round(time.monotonic() - clock.start, 1), victim.name])
      next_chaos_kill = time.monotonic() + settings.chaos_kill_interval_s
    progress = _progress(roles_on, settings.num_actors)
    results = roles_on.read_results()
    try:
      refusals.check(_pullers(progress), progress['learner'])
    except ActorQError:
      # The run stops on what the actors did: the user sees it last.
      log(_progress_line(time.monotonic() - clock.start, progress,
                         results[-1:]))
      raise
    for result in results[seen_results:]:
      if keeper.add(result):
        target_time = time.monotonic()
        summary.update(
            target_reached=True,
            time_to_target_s=round(result['time'] - clock.wall_time, 1),
            env_steps_to_target=progress['env_steps'],
            train_steps_to_target=result['version'])
        log(f'Target met: evaluations of versions '
            f'{", ".join(str(r["version"]) for r in keeper.rule.streak)} '
            f'reached {keeper.rule.target_return:g}; version '
            f'{result["version"]} kept in '
            f'{os.path.dirname(keeper.model_path("target"))}.')
        if meter:
          reading = meter.reading()
          summary.update(energy_kwh_to_target=reading.energy_kwh,
                         emissions_kg_to_target=reading.emissions_kg)
    seen_results = len(results)
    now = time.monotonic()
    budget = over_budget(settings.max_env_steps, settings.max_wall_time_s,
                         progress['env_steps'], now - clock.start)
    status = None
    if target_time is not None:
      # A stop while it trains on after the target cuts only the hold.
      if interrupted.signal_name or budget or (
          now - target_time >= settings.continue_after_target_s):
        status = 'target_reached'
    elif interrupted.signal_name:
      status = f'interrupted ({interrupted.signal_name})'
    elif budget:
      status = budget
    if status or now >= next_progress:
      log(_progress_line(now - clock.start, progress, results[-1:]))
      next_progress = now + settings.progress_interval_s
      if meter:
        metrics.write_energy(energy_writer, meter.reading(),
                             int(now - clock.start))
    look_seconds.append(time.monotonic() - look_start)
    if status:
      return status, seen_results


def _chaos_victim(chaos: random.Random, roles: List):
  """A random kind of role (server, learner, evaluator, actor), then a
  random role of it: with many actors, the few roles they rely on are hit
  as often as the actors are."""
  kinds = {}
  for role in roles:
    kinds.setdefault('actor' if role.name.startswith('actor_') else role.name,
                     []).append(role)
  return chaos.choice(kinds[chaos.choice(sorted(kinds))])


def _summarize(summary: Dict, outcome: _Outcome, settings: RunSettings,
               roles_on, roles: List, keeper: '_ResultKeeper',
               clock: _Clock, seen_results: int,
               look_seconds: List[float]) -> None:
  """Completes `summary` once every role stopped: how the run ended, the
  model it keeps and what it played, the counters and the roles' fates."""
  progress = _progress(roles_on, settings.num_actors)
  results = roles_on.read_results()
  for result in results[seen_results:]:  # Ended while the roles stopped.
    keeper.add_after_stop(result)
  kept_name = 'target' if keeper.target else 'best' if keeper.best else None
  kept = keeper.target or keeper.best
  summary.update(
      status=outcome.status,
      error=outcome.error,
      wall_time_s=round(time.monotonic() - clock.start, 1),
      env_steps=progress['env_steps'],
      train_steps=progress['train_steps'],
      # The kept model and what it played: the version that met the target,
      # else the best evaluated one.
      model_path=kept_name and keeper.model_path(kept_name),
      eval_version=kept and kept['version'],
      eval_return_int8=kept and kept['return_int8'],
      eval_return_fp32=kept and kept['return_fp32'],
      target_evaluation=_evaluation_summary(keeper.target),
      target_model_path=keeper.target and keeper.model_path('target'),
      best_evaluation=_evaluation_summary(keeper.best),
      best_model_path=keeper.best and keeper.model_path('best'),
      last_evaluation=_evaluation_summary(results[-1] if results else None),
      post_target_returns=[[r['version'], r[summary['target_metric']]]
                           for r in keeper.post_target],
      # Replay ratio, and replay items the learner refused (see replay).
      **{k: v for k, v in progress['learner'].items()
         if k.startswith('replay_') and k != 'replay_size'},
      last_replay_refusal=progress['learner'].get('last_replay_refusal'),
      model_update_bytes=progress['model_update_bytes'].get(
          settings.actor_precision),
      # Share of each actor's env steps whose action a model chose (the
      # rest came before its first model) and versions it refused.
      actor_model_share={run_directory.actor_role(i): a.get('model_share')
                         for i, a in enumerate(progress['actors'])},
      actor_refused_versions={run_directory.actor_role(i):
                              a.get('refused_versions', 0)
                              for i, a in enumerate(progress['actors'])},
      eval_refused_versions=progress['evaluator'].get('refused_versions', 0),
      # Which versions each actor acted with: all signed with the run key,
      # and all published by the learner (else named here and in progress).
      actor_versions_run={
          run_directory.actor_role(i): _versions_run(a, progress['learner'])
          for i, a in enumerate(progress['actors'])},
      role_restarts={role.name: role.restarts for role in roles},
      monitor_look_s={
          'looks': len(look_seconds),
          'median': (round(float(np.median(look_seconds)), 4)
                     if look_seconds else None),
          'max': round(max(look_seconds), 4) if look_seconds else None},
      exit_codes={role.name: role.exit_code() for role in roles},
      **roles_on.summary())


def over_budget(max_env_steps: int, max_wall_time_s: float, env_steps: int,
                elapsed_s: float) -> Optional[str]:
  """The budget that ran out ('max_env_steps' or 'max_wall_time'), if any;
  a budget of 0 is none."""
  if max_env_steps and env_steps >= max_env_steps:
    return 'max_env_steps'
  if max_wall_time_s and elapsed_s >= max_wall_time_s:
    return 'max_wall_time'
  return None


def restart_refusal(settings: RunSettings, restarts: int, exit_code: int,
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


def _restart_or_fail(role, settings: RunSettings, killed_by_chaos: bool,
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


def _wait_for_role_server(server, address: str,
                          interrupted: _Interrupted,
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


class _RefusalWatch:
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

  def check(self, pullers: Dict[str, Dict], learner: Dict) -> None:
    in_a_row = learner.get('replay_items_refused_in_a_row', 0)
    if (in_a_row >= self._max_replay_items and
        learner.get('time', 0.0) >= self._since):
      raise ActorQError(
          f'the learner refused the last {in_a_row:,} replay items it read '
          f'({learner.get("last_replay_refusal")}); the run stops rather '
          'than train on nothing. Do all actors have the run key?')
    for name, status in pullers.items():
      refused = status.get('consecutive_refusals', 0)
      if not refused or status.get('time', 0.0) < self._since:
        continue
      seconds = time.time() - (status.get('refusing_since') or time.time())
      random_actions = not status.get('model_version')
      if refused >= self._max_versions or (
          random_actions and seconds >= self._max_seconds):
        raise ActorQError(
            f'{name} refused {refused} model version(s) in a row, '
            f'the first {seconds:.0f} s ago, and acts with model version '
            f'{status.get("model_version", 0)} (0: none); the run '
            'stops rather than train on that. Last refusal: '
            f'{status.get("last_refusal")}')


def _pullers(progress: Dict) -> Dict[str, Dict]:
  """The status of each role that pulls models, by role name."""
  pullers = {run_directory.actor_role(i): a
             for i, a in enumerate(progress['actors'])}
  pullers[run_directory.EVALUATOR_ROLE] = progress['evaluator']
  return pullers


def _versions_run(actor: Dict, learner: Dict) -> Dict:
  versions = actor.get('versions_run', [])
  return {'count': len(versions),
          'first': versions[0] if versions else None,
          'last': versions[-1] if versions else None,
          'not_published_by_learner': sorted(
              set(versions) - set(learner.get('published_versions', [])))}


def _progress(roles_on, num_actors: int) -> Dict:
  actors = [roles_on.read_status(run_directory.actor_role(i)) or {}
            for i in range(num_actors)]
  learner = roles_on.read_status(run_directory.LEARNER_ROLE) or {}
  return {
      'actors': actors,
      'evaluator': roles_on.read_status(run_directory.EVALUATOR_ROLE) or {},
      'env_steps': sum(a.get('env_steps', 0) for a in actors),
      'env_steps_per_second': sum(a.get('env_steps_per_second', 0.0)
                                  for a in actors),
      'model_versions': [a.get('model_version', 0) for a in actors],
      'train_steps': learner.get('train_step', 0),
      'train_steps_per_second': learner.get('train_steps_per_second', 0.0),
      'model_update_bytes': learner.get('model_update_bytes', {}),
      'learner': learner,
  }


def _progress_line(elapsed_s: float, progress: Dict, results: List) -> str:
  line = (f'[{elapsed_s:6.0f} s] env steps {progress["env_steps"]:,} '
          f'({progress["env_steps_per_second"]:,.0f}/s) | train steps '
          f'{progress["train_steps"]:,} '
          f'({progress["train_steps_per_second"]:,.0f}/s) | actor model '
          f'v{min(progress["model_versions"] or [0])}')
  actors = progress['actors']
  random_share = max((1.0 - a.get('recent_model_share', 0.0) for a in actors
                      if a.get('env_steps')), default=0.0)
  if random_share >= 0.005:
    line += f' ({random_share:.0%} of recent steps random: no model)'
  learner = progress.get('learner', {})
  for name, status in _pullers(progress).items():
    if status.get('consecutive_refusals'):
      line += (f' | {name} REFUSED {status["consecutive_refusals"]} '
               f'version(s), last {status.get("last_refusal")}')
    elif status.get('refused_versions'):
      line += (f' | {name} refused {status["refused_versions"]} row(s) '
               f'earlier, last {status.get("last_refusal")}')
  for index, actor in enumerate(actors):
    # Cannot happen unless the run key leaked: said, not assumed.
    unpublished = _versions_run(actor, learner)['not_published_by_learner']
    if learner and unpublished:
      line += (f' | actor_{index} RAN VERSION(S) THE LEARNER NEVER '
               f'PUBLISHED: {unpublished[:3]}')
  if learner.get('replay_items_refused'):
    line += (f' | learner REFUSED {learner["replay_items_refused"]:,} of '
             f'{learner["replay_items_checked"]:,} replay items, last '
             f'{learner.get("last_replay_refusal")}')
  for kind in ('skipped', 'refused'):
    if learner.get(f'{kind}_exports'):
      line += (f' | learner {kind.upper()} {learner[f"{kind}_exports"]} '
               f'export(s), last {learner.get(f"last_{kind}_export")}')
  if results:
    r = results[-1]
    line += (f' | eval v{r["version"]}: int8 {r["return_int8"]:.1f}, '
             f'fp32 {r["return_fp32"]:.1f}')
  return line


def _stop_roles(roles: List, grace_s: float) -> None:
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
