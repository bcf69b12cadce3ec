"""The evaluator: greedy int8 model and greedy fp32 network, same seeds.

Greedy is the argmax of Q-values for discrete actions and the actor
network's action, without noise, for continuous ones.

Whenever a newer model is published it plays `num_episodes` greedy episodes
with the int8 TFLite model and with the fp32 network of the same version, on
the same seeds, and logs both returns: reward retention, side by side.
"""
import json
import os
import time
from typing import Callable, Dict, List

from absl import logging
import gin
import numpy as np
import tensorflow as tf
from tf_agents.experimental.distributed import reverb_variable_container

from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import metrics
from actorq_tf import model_channel
from actorq_tf import networks
from actorq_tf.errors import ActorQError
from actorq_tf.tflite_policy import load_untrusted_model
from actorq_tf.watchdog import ProgressWatchdog

RESULTS_FILE = os.path.join('eval', 'results.jsonl')


def greedy_returns(envs, greedy_actions: Callable[[np.ndarray], np.ndarray],
                   seeds: List[int]) -> List[float]:
  """Undiscounted return of one greedy episode per seed, one env per seed.

  The episodes run in lockstep so that each policy call takes a batch of
  observations: a batch of 10 costs about as much as one observation.
  """
  action_dtype = envs[0].action_spec().dtype
  time_steps = []
  for env, seed in zip(envs, seeds):
    env.seed(seed)
    time_steps.append(env.reset())
  returns = [0.0] * len(envs)
  running = list(range(len(envs)))
  while running:
    observations = np.stack([time_steps[i].observation for i in running])
    actions = greedy_actions(observations.astype(np.float32))
    for i, action in zip(running, actions):
      time_steps[i] = envs[i].step(np.asarray(action, action_dtype))
      returns[i] += float(time_steps[i].reward)
    running = [i for i in running if not time_steps[i].is_last()]
  return returns


def read_results(root_dir: str) -> List[Dict]:
  try:
    with open(os.path.join(root_dir, RESULTS_FILE)) as f:
      return [json.loads(line) for line in f if line.strip()]
  except FileNotFoundError:
    return []


@gin.configurable
def run_evaluator(root_dir: str,
                  server_address: str,
                  seed: int = 0,
                  num_episodes: int = 10,
                  min_interval_s: float = 5.0,
                  server_timeout_s: float = 120.0,
                  should_stop=lambda: False,
                  max_evaluations: int = 0) -> int:
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
    should_stop: polled between evaluations.
    max_evaluations: stop after this many; 0 runs until stopped.
  """
  envs = [environments.load_environment() for _ in range(num_episodes)]
  env = envs[0]
  agents.check_environment(env)
  seeds = [10**6 + seed * 1000 + i for i in range(num_episodes)]
  policy_network = networks.policy_network_for(env)
  discrete = environments.is_discrete(env)
  version = tf.Variable(0, dtype=tf.int64)
  variables = model_channel.policy_variables(policy_network.variables,
                                             version)
  client = model_channel.wait_for_server(server_address, server_timeout_s)
  container = reverb_variable_container.ReverbVariableContainer(
      server_address, table_names=[model_channel.VARIABLES_TABLE])
  puller = model_channel.ModelPuller(client, 'int8')
  # A restarted evaluator goes on after the newest version it evaluated.
  puller.version = max([r['version'] for r in read_results(root_dir)],
                       default=0)
  watchdog = ProgressWatchdog(
      server_timeout_s, f'waiting for the Reverb server at {server_address}')
  summary_writer = metrics.summary_writer(root_dir, 'eval')
  results_path = os.path.join(root_dir, RESULTS_FILE)
  os.makedirs(os.path.dirname(results_path), exist_ok=True)

  @tf.function(input_signature=[tf.TensorSpec(
      [None, *env.observation_spec().shape], tf.float32)])
  def fp32_greedy_actions(observations):
    outputs, _ = policy_network(observations, training=False)
    return tf.argmax(outputs, axis=-1) if discrete else outputs

  spec = env.action_spec()

  def within_bounds(actions):
    # As actors send them: the environment gets actions within its bounds.
    return actions if discrete else np.clip(actions, spec.minimum,
                                            spec.maximum)

  evaluations = 0
  while not should_stop() and not (max_evaluations and
                                   evaluations >= max_evaluations):
    start = time.monotonic()
    watchdog.beat()
    try:
      model = puller.pull_newer()
    except model_channel.SERVER_ERRORS as e:
      logging.warning('Could not pull a model (%s); trying again.',
                      type(e).__name__)
      model = None
    if model is None:
      time.sleep(1.0)
      continue
    # The learner pushes a version's variables right after its models.
    for _ in range(20):
      container.update(variables, table=model_channel.VARIABLES_TABLE)
      if int(version.numpy()) >= model.version:
        break
      time.sleep(0.1)
    try:
      int8_model = load_untrusted_model(
          model.model_bytes, model.normalizer, env.observation_spec().shape,
          environments.policy_output_size(env), tie_break_seed=seed)
    except ActorQError as e:
      puller.refuse(model, e.message)
      continue
    puller.accept(model)
    int8_returns = greedy_returns(
        envs, lambda o: (int8_model.greedy_actions(o) if discrete
                         else within_bounds(int8_model.outputs(o))), seeds)
    fp32_returns = greedy_returns(
        envs, lambda o: within_bounds(fp32_greedy_actions(o).numpy()), seeds)
    result = {
        'time': time.time(),
        'version': model.version,
        'fp32_version': int(version.numpy()),
        'return_int8': float(np.mean(int8_returns)),
        'return_fp32': float(np.mean(fp32_returns)),
        'returns_int8': int8_returns,
        'returns_fp32': fp32_returns,
    }
    with open(results_path, 'a') as f:
      f.write(json.dumps(result) + '\n')
    with summary_writer.as_default(step=model.version):
      tf.summary.scalar('eval/return_int8', result['return_int8'])
      tf.summary.scalar('eval/return_fp32', result['return_fp32'])
      if result['return_fp32']:
        tf.summary.scalar('eval/retention_int8_over_fp32',
                          result['return_int8'] / result['return_fp32'])
    logging.info('Eval version %d: int8 %.1f, fp32 %.1f', model.version,
                 result['return_int8'], result['return_fp32'])
    evaluations += 1
    metrics.write_status(root_dir, 'eval', evaluations=evaluations, **{
        k: v for k, v in result.items() if not k.startswith('returns')})
    time.sleep(max(0.0, min_interval_s - (time.monotonic() - start)))
  watchdog.stop()
  summary_writer.close()
  return evaluations
