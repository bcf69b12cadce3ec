"""Runs a whole ActorQ training: one process per role.

Starts the learner (which hosts the Reverb server unless it is a role of
its own), the evaluator and N actors as processes of this machine (or of a
cluster's nodes, see `placement`), each logging to
`root_dir/logs/<role>.log`; prints progress, restarts a role that dies (the
learner and server from their checkpoints; see `supervision`), stops at the
target return or a budget (`run_results`), shuts every role down in order,
and writes `summary.json` last, so a run directory with a summary is
finished. A run directory without a summary is resumed by the same command.
"""
import collections
import dataclasses
import functools
import json
import os
import random
import time
from typing import Dict, List, Optional, Sequence, Tuple

import gin

from actorq_tf import config
from actorq_tf import energy
from actorq_tf import evaluation
from actorq_tf import placement
from actorq_tf import records
from actorq_tf import run_directory
from actorq_tf import run_results
from actorq_tf import signing
from actorq_tf import supervision
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


@gin.configurable
def run_training(settings: RunSettings,
              target_return: float = gin.REQUIRED,
              target_evaluations_in_a_row: int = 2,
              max_refused_versions: int = 3,
              max_refusing_s: float = 600.0,
              max_refused_replay_items: int = 10_000,
              replay_in_learner: bool = True,
              roles_on=None,
              log=functools.partial(print, flush=True)
              ) -> records.RunSummary:
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
      run_results.target_metric(settings.actor_precision), target_return,
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

  interrupted = supervision.Interrupted()
  common_args = ['--root_dir', root_dir, '--seed', str(settings.seed)]
  for gin_file in settings.gin_files:
    common_args += ['--gin_file', gin_file]
  for binding in settings.gin_bindings:
    common_args += ['--gin_bindings', binding]

  keeper = run_results.ResultKeeper(root_dir, rule, roles_on, log)
  if meter:
    meter.start()
  clock = run_results.Clock(time.monotonic(), time.time())
  reporter = run_results.LaunchReporter(
      root_dir, clock, settings.progress_interval_s, meter, log)
  roles = []
  summary = records.RunSummary(
      precision=settings.actor_precision,
      target_return=target_return,
      target_metric=run_results.target_metric(settings.actor_precision),
      stopping_rule=rule.description(),
      num_actors=settings.num_actors,
      seed=settings.seed,
      code_version=run_directory.code_version(),
      start_time=clock.wall_time,
      gin_files=list(settings.gin_files),
      gin_bindings=list(settings.gin_bindings),
      resumed=resumed,
      earlier_launches=earlier_launches)
  seen_results = 0
  outcome = run_results.Outcome('failed')
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
    summary.replay_server_address = address
    # The clients wait for the server themselves: starting them now
    # overlaps their start-up (TensorFlow's import) with the server's.
    _start_clients(settings, roles_on, common_args + [
        '--replay_server_address', address], role_environment, roles)
    # Results of an earlier launch of a resumed run do not end this one
    # (read where the evaluator runs, once it does, before it has a model
    # to evaluate).
    seen_results = len(roles_on.read_results())
    keeper.recall_best()
    supervision.wait_for_role_server(server, address, interrupted)
    log(f'{"Resuming" if resumed else "Run"} directory {root_dir}: Reverb '
        f'at {address} (in the {server.name} process), learner, evaluator '
        f'and {settings.num_actors} {settings.actor_precision} actor(s) on '
        f'{roles_on.describe()}')
    status, seen_results = _monitor(
        settings, roles_on, roles, keeper, interrupted, clock, summary,
        seen_results,
        supervision.RefusalWatch(max_refused_versions, max_refusing_s,
                                 max_refused_replay_items, clock.wall_time),
        reporter)
    outcome = run_results.Outcome(status)
  except ActorQError as e:
    outcome = run_results.Outcome('failed', e.message)
  finally:
    log(f'Stopping ({"a role failed" if outcome.error else outcome.status}).')
    supervision.stop_roles(roles, settings.shutdown_grace_s)

  summary = run_results.summarize(summary, outcome, settings, roles_on,
                                  roles, keeper, clock, seen_results)
  summary = reporter.finish(summary)
  try:
    run_directory.write_summary(root_dir, summary)
  except OSError as e:
    # Without its summary the directory stays resumable, as it should.
    log(json.dumps(summary.to_dict(), indent=1))
    raise ActorQError(
        f'could not write {run_directory.SUMMARY_FILE} into {root_dir} '
        f'({e.strerror}); the run stopped as {outcome.status!r}'
        f'{": " + outcome.error if outcome.error else ""}; its summary is '
        'above') from e
  if outcome.error is not None:
    raise ActorQError(outcome.error)
  return summary


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
             keeper: run_results.ResultKeeper,
             interrupted: supervision.Interrupted, clock: run_results.Clock,
             summary: records.RunSummary, seen_results: int,
             refusals: supervision.RefusalWatch,
             reporter: run_results.LaunchReporter) -> Tuple[str, int]:
  """Watches the running roles until the run ends; returns its status and
  how many evaluation results it has taken.

  Restarts roles that exit (or raises ActorQError when one must not be),
  injects chaos kills, applies the stopping rule to each new evaluation
  (target figures go into `summary`), and prints progress.
  """
  log = reporter.log
  target_time = None
  chaos = random.Random(settings.seed)
  next_chaos_kill = clock.start + (settings.chaos_kill_interval_s or
                                   float('inf'))
  chaos_killed = set()
  chaos_restarts = collections.Counter()  # Restarts that chaos caused.
  while True:
    time.sleep(0.5)
    reporter.look_started()
    for role in roles:
      if role.exit_code() is not None:
        killed_by_chaos = role.name in chaos_killed
        supervision.restart_or_fail(
            role, settings, killed_by_chaos,
            role.restarts - chaos_restarts[role.name], log)
        if killed_by_chaos:
          chaos_restarts[role.name] += 1
        chaos_killed.discard(role.name)
    # Never a role whose restart is still to come, and after a slow look at
    # the roles (Ray under load) one kill, not those the wait skipped.
    running = [role for role in roles if role.name not in chaos_killed]
    if time.monotonic() >= next_chaos_kill and running:
      victim = supervision.chaos_victim(chaos, running)
      log(f'Chaos: killing {victim.name} (SIGKILL).')
      victim.kill()
      chaos_killed.add(victim.name)
      summary.chaos_kills.append(
          [round(time.monotonic() - clock.start, 1), victim.name])
      next_chaos_kill = time.monotonic() + settings.chaos_kill_interval_s
    progress = run_results.read_progress(roles_on, settings.num_actors)
    results = roles_on.read_results()
    try:
      refusals.check(progress.pullers(), progress.learner)
    except ActorQError:
      # The run stops on what the actors did: the user sees it last.
      reporter.show(progress, results, ending=True)
      raise
    for result in results[seen_results:]:
      if keeper.add(result):
        target_time = time.monotonic()
        summary.target_reached = True
        summary.time_to_target_s = round(result['time'] - clock.wall_time, 1)
        summary.env_steps_to_target = progress.env_steps
        summary.train_steps_to_target = result['version']
        log(f'Target met: evaluations of versions '
            f'{", ".join(str(r["version"]) for r in keeper.rule.streak)} '
            f'reached {keeper.rule.target_return:g}; version '
            f'{result["version"]} kept in '
            f'{os.path.dirname(keeper.model_path("target"))}.')
        reporter.target_met(summary)
    seen_results = len(results)
    now = time.monotonic()
    budget = supervision.over_budget(
        settings.max_env_steps, settings.max_wall_time_s,
        progress.env_steps, now - clock.start)
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
    reporter.show(progress, results, ending=bool(status))
    reporter.look_ended()
    if status:
      return status, seen_results


