"""The evaluator: greedy int8 model and greedy fp32 network, same seeds.

Greedy is the algorithm's, as its builder gives it: the argmax of Q-values
for DQN, the actor network's action, without noise, for D4PG.

Whenever a newer model is published it plays `num_episodes` greedy episodes
with the int8 TFLite model and with the fp32 network of the same version, on
the same seeds, and logs both returns: reward retention, side by side. The
newest evaluated versions are kept on disk (`eval/versions/v<version>/`), so
that the launcher can keep the one that earned a run's result.
"""
import dataclasses
import json
import os
import shutil
import time
from typing import Callable, Dict, List

from absl import logging
import gin
import numpy as np
import tensorflow as tf

from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import metrics
from actorq_tf import model_channel
from actorq_tf import records
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf import signing
from actorq_tf.errors import ActorQError
from actorq_tf.errors import SERVER_ERRORS
from actorq_tf.interpreter import load_untrusted_model



def retention(int8_return: float, fp32_return: float):
  """How much of the fp32 network's return the int8 model keeps: 1 is all.

  int8 / fp32 for positive fp32 returns (negative when int8 is); fp32 /
  int8 when both are negative (Pendulum, Acrobot), so that a worse int8
  model scores under 1 either way; None when fp32 is 0, or negative with
  int8 not.
  """
  if int8_return is None or fp32_return is None:
    return None
  if fp32_return > 0:
    return int8_return / fp32_return
  if fp32_return < 0 and int8_return < 0:
    return fp32_return / int8_return
  return None


def greedy_returns(envs, greedy_actions: Callable[[np.ndarray], np.ndarray],
                   seeds: List[int]) -> List[float]:
  """Undiscounted return of one greedy episode per seed, one env per seed.

  The episodes run in lockstep so that each policy call takes a batch of
  observations: a batch of 10 costs about as much as one observation. They
  step as the actors do, past TF-Agents' wrappers (`DirectSteps`), which
  cost CartPole-v1 several times the gym step itself.
  """
  action_dtype = envs[0].action_spec().dtype
  steppers = []
  observations = []
  for env, seed in zip(envs, seeds):
    environments.seed_environment(env, seed)
    steppers.append(environments.DirectSteps(env))
    observations.append(steppers[-1].reset())
  returns = [0.0] * len(envs)
  running = list(range(len(envs)))
  while running:
    actions = greedy_actions(
        np.stack([observations[i] for i in running]))
    still_running = []
    for i, action in zip(running, actions):
      observations[i], reward, _, last = steppers[i].step(
          np.asarray(action, action_dtype))
      returns[i] += float(reward)
      if not last:
        still_running.append(i)
    running = still_running
  return returns


class StoppingRule:
  """The target is met when `evaluations_in_a_row` evaluations in a row,
  each of a newer version, reach `target_return` on `metric`, the mean
  return of `episodes_per_evaluation` greedy episodes. Returns of one
  version can swing by hundreds: one evaluation alone would let a lucky
  snapshot end a run."""

  def __init__(self, metric: str, target_return: float,
               evaluations_in_a_row: int, episodes_per_evaluation: int):
    if evaluations_in_a_row < 1:
      raise ActorQError('the stopping rule needs at least 1 evaluation, not '
                        f'{evaluations_in_a_row}')
    if episodes_per_evaluation < 1:
      raise ActorQError('an evaluation needs at least 1 episode, not '
                        f'{episodes_per_evaluation}')
    self.metric = metric
    self.target_return = target_return
    self.evaluations_in_a_row = evaluations_in_a_row
    self.episodes_per_evaluation = episodes_per_evaluation
    self.streak: List[Dict] = []

  def met_by(self, result: Dict) -> bool:
    """Takes the next evaluation; True when it completes the streak."""
    met = result[self.metric] >= self.target_return
    self.streak = self.streak + [result] if met else []
    return len(self.streak) >= self.evaluations_in_a_row

  def description(self) -> Dict:
    return {'metric': self.metric, 'target_return': self.target_return,
            'evaluations_in_a_row': self.evaluations_in_a_row,
            'episodes_per_evaluation': self.episodes_per_evaluation}


class EvaluatorReporter:
  """The evaluator's status file, TensorBoard points and log lines: its
  refusals as soon as they change (the launcher stops a run whose evaluator
  keeps refusing, as it does one whose actors do), the versions it could not
  evaluate, and each evaluation."""

  def __init__(self, root_dir: str, puller: model_channel.ModelPuller,
               refusals: model_channel.Refusals):
    self._root_dir = root_dir
    self._puller = puller
    self._refusals = refusals
    self._writer = metrics.summary_writer(root_dir,
                                          run_directory.EVALUATOR_ROLE)
    self._written_refusals = refusals.status()
    self._status = records.EvaluatorStatus()
    self._unmatched_versions = set()

  def _write(self, **changes) -> None:
    self._status = dataclasses.replace(
        self._status, model_version=self._puller.version,
        **self._refusals.status(), **changes)
    run_directory.write_status(self._root_dir, run_directory.EVALUATOR_ROLE,
                               self._status)

  def show_refusals(self) -> None:
    if self._refusals.status() == self._written_refusals:
      return
    self._written_refusals = self._refusals.status()
    self._write()
    with self._writer.as_default(step=self._puller.version):
      tf.summary.scalar('eval/refused_versions',
                        self._written_refusals['refused_versions'])
      tf.summary.text('eval/last_refusal',
                      self._written_refusals['last_refusal'])

  def not_evaluated(self, model_version: int, variables_version: int) -> None:
    """int8 `model_version` came without the fp32 variables of its own
    version: said once per version."""
    if model_version in self._unmatched_versions:
      return
    self._unmatched_versions.add(model_version)
    logging.warning(
        'Not evaluating int8 version %d: the fp32 variables are version %d '
        '(%d version(s) unmatched so far).', model_version, variables_version,
        len(self._unmatched_versions))
    self._write(unmatched_versions=len(self._unmatched_versions))
    with self._writer.as_default(step=model_version):
      tf.summary.scalar('eval/unmatched_versions',
                        len(self._unmatched_versions))

  def evaluated(self, result: Dict) -> None:
    with self._writer.as_default(step=result['version']):
      tf.summary.scalar('eval/return_int8', result['return_int8'])
      tf.summary.scalar('eval/return_fp32', result['return_fp32'])
      kept = retention(result['return_int8'], result['return_fp32'])
      if kept is not None:
        tf.summary.scalar('eval/retention_int8_over_fp32', kept)
    logging.info('Eval version %d: int8 %.1f, fp32 %.1f', result['version'],
                 result['return_int8'], result['return_fp32'])
    self._write(evaluations=self._status.evaluations + 1,
                **{name: result[name] for name in (
                    'version', 'fp32_version', 'return_int8',
                    'return_fp32')})

  @property
  def evaluations(self) -> int:
    return self._status.evaluations

  def close(self) -> None:
    self._writer.close()


@gin.configurable
def run_evaluator(root_dir: str,
                  server_address: str,
                  seed: int = 0,
                  num_episodes: int = 10,
                  min_interval_s: float = 5.0,
                  server_timeout_s: float = runtime.SERVER_TIMEOUT_S,
                  variables_timeout_s: float = 10.0,
                  kept_versions: int = 3,
                  should_stop=lambda: False,
                  max_evaluations: int = 0,
                  model_key_file: str = '') -> int:
  """Evaluates each newer model until stopped; returns evaluations done.

  Args:
    root_dir: run directory; results go to eval/results.jsonl and
      TensorBoard under eval/.
    server_address: host:port of the Reverb server.
    seed: the episodes use seeds seed*1000 + 10**6 + i, the same for both
      policies and every version.
    num_episodes: greedy episodes per policy per evaluation.
    min_interval_s: seconds between the starts of two evaluations.
    server_timeout_s: how long the Reverb server may not answer before the
      evaluator gives up.
    variables_timeout_s: how long a model may wait for the fp32 variables
      of its own version; the learner pushes them right after its models.
      A model whose variables do not come, or were already replaced by a
      newer version's, is not evaluated: int8 is only ever compared with
      fp32 of the same version.
    kept_versions: evaluated versions kept in eval/versions/.
    should_stop: polled between evaluations.
    max_evaluations: stop after this many; 0 runs until stopped.
    model_key_file: the run key's file (see `signing.run_key`); '' takes
      the key the launcher handed over, else root_dir's.
  """
  envs = [environments.load_environment() for _ in range(num_episodes)]
  env = envs[0]
  algorithm = agents.check_environment(env)
  seeds = [10**6 + seed * 1000 + i for i in range(num_episodes)]
  policy_network = algorithm.policy_network(env)
  checkpoint = tf.train.Checkpoint(policy_network=policy_network)
  key = signing.run_key(root_dir, model_key_file)
  client = model_channel.wait_for_server(server_address, server_timeout_s)
  replay.check_same_environment(client, algorithm.collect_data_spec(env))
  # One count for both tables: the run stops on either kept refusing.
  refusals = model_channel.Refusals('int8 model or fp32 variables')
  variables = model_channel.VariablesPuller(
      server_address, policy_network.variables, key, refusals)
  puller = model_channel.ModelPuller(client, 'int8', key, refusals=refusals)
  # A restarted evaluator goes on after the newest version it evaluated.
  puller.version = max([r['version'] for r in run_directory.read_results(root_dir)],
                       default=0)
  watchdog = runtime.Watchdog(
      server_timeout_s, f'waiting for the Reverb server at {server_address}')
  results_path = os.path.join(root_dir, run_directory.EVAL_RESULTS_FILE)
  os.makedirs(os.path.dirname(results_path), exist_ok=True)
  action_spec = env.action_spec()

  @tf.function(input_signature=[tf.TensorSpec(
      [None, *env.observation_spec().shape],
      tf.as_dtype(env.observation_spec().dtype))])
  def fp32_greedy_actions(observations):
    outputs, _ = policy_network(observations, training=False)
    return algorithm.greedy_actions(outputs, action_spec)

  def variables_of(model_version: int) -> bool:
    """Pulls fp32 variables until they are `model_version`'s; False when
    they are another version's (a newer one replaced them, or ours did not
    come in time)."""
    deadline = time.monotonic() + variables_timeout_s
    while True:
      variables.update()
      if (variables.version >= model_version or
          time.monotonic() >= deadline):
        return variables.version == model_version
      time.sleep(0.1)

  if kept_versions < 1:
    raise ActorQError(f'kept_versions must be at least 1, not {kept_versions}')
  reporter = EvaluatorReporter(root_dir, puller, refusals)
  while not should_stop() and not (
      max_evaluations and reporter.evaluations >= max_evaluations):
    start = time.monotonic()
    watchdog.beat()
    reporter.show_refusals()
    try:
      model = puller.pull_newer()
      matched = model is not None and variables_of(model.version)
    except SERVER_ERRORS as e:
      logging.warning('Could not pull a model (%s); trying again.',
                      type(e).__name__)
      puller.forget_sample()
      model = None
    if model is None:
      time.sleep(1.0)
      continue
    if not matched:
      reporter.not_evaluated(model.version, variables.version)
      if variables.version > model.version:
        # Its variables are gone for good: wait for a newer model.
        puller.version = model.version
      else:
        puller.forget_sample()  # Its variables may still come.
        time.sleep(1.0)
      continue
    try:
      int8_model = load_untrusted_model(
          model.model_bytes, model.normalizer, env.observation_spec().shape,
          algorithm.policy_output_size(env), tie_break_seed=seed)
    except ActorQError as e:
      puller.refuse(model, e.message)
      continue
    puller.accept(model)
    int8_returns = greedy_returns(
        envs, lambda o: algorithm.model_actions(int8_model, o, action_spec),
        seeds)
    fp32_returns = greedy_returns(
        envs, lambda o: fp32_greedy_actions(o).numpy(), seeds)
    result = {
        'time': time.time(),
        'version': model.version,
        'fp32_version': variables.version,
        'return_int8': float(np.mean(int8_returns)),
        'return_fp32': float(np.mean(fp32_returns)),
        'returns_int8': int8_returns,
        'returns_fp32': fp32_returns,
    }
    # On disk before the result is: whoever reads the result finds them.
    _keep_version(root_dir, model, policy_network, checkpoint, result,
                  kept_versions)
    with open(results_path, 'a') as f:
      f.write(json.dumps(result) + '\n')
    reporter.evaluated(result)
    time.sleep(max(0.0, min_interval_s - (time.monotonic() - start)))
  watchdog.stop()
  reporter.close()
  return reporter.evaluations


def _keep_version(root_dir: str, model, policy_network, checkpoint,
                  result: Dict, kept_versions: int) -> None:
  """Writes the evaluated version's int8 model, fp32 weights and fp32
  checkpoint to its directory; removes all but the newest `kept_versions`."""

  def fill(directory):
    os.makedirs(directory)
    export.save_model_files(
        os.path.join(directory, run_directory.KEPT_MODEL), model.model_bytes,
        model.normalizer, policy_network.get_weights(),
        version=model.version, precision='int8',
        evaluation={k: v for k, v in result.items() if k != 'time'})
    checkpoint.write(os.path.join(directory, run_directory.KEPT_CHECKPOINT))

  run_directory.write_directory_atomically(run_directory.version_dir(root_dir, model.version),
                                           fill)
  parent = os.path.join(root_dir, run_directory.EVAL_VERSIONS_DIR)
  versions = sorted(int(name[1:]) for name in os.listdir(parent)
                    if name.startswith('v') and name[1:].isdigit())
  for old in versions[:-kept_versions]:
    shutil.rmtree(run_directory.version_dir(root_dir, old), ignore_errors=True)
    shutil.rmtree(run_directory.version_dir(root_dir, old) + '.partial', ignore_errors=True)
