"""Actor env steps/s per precision, side by side in one process and run.

Each actor does the real work (env step, policy, exploration, Reverb
writes) against a real Reverb server whose replay never blocks inserts, so
the figure is the actor's own speed. Each row proves what it measures: the
actor waits for its first model, its rate counts only its env loop, and
the share of its steps that the model chose must be at least 0.99.

The env-only loop (random actions, no policy, no Reverb, stepping the
environment the way actors do) and the interpreter's invoke time are the
limit an actor can approach: efficiency = (env step time + invoke time) /
actor step time.

  .venv/bin/python -m benchmarks.actor_throughput [--env_steps 20000]
  .venv/bin/python -m benchmarks.actor_throughput \\
      --gin_file d4pg_walker_stand.gin --env_steps 3000 \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import json
import os
import tempfile
import time

from absl import app
from absl import flags
import gin
import numpy as np
import reverb

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import config
from actorq_tf import conversion
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import model_checks
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import server
from actorq_tf import signing
from actorq_tf.errors import ActorQError
from benchmarks import common

common.define_flags('dqn_cartpole.gin')
flags.DEFINE_integer('env_steps', 20_000, 'Env steps per TFLite measurement; '
                     'tf actors take a quarter, env-only twice as many.')
flags.DEFINE_integer('repeats', 3, 'Measurements per row; the median counts.')
FLAGS = flags.FLAGS

ENV_ONLY = 'env_only'
ENV_ONLY_TF_AGENTS = 'env_only_tf_agents'
MIN_MODEL_SHARE = 0.99
# Row -> (actor precision, env steps between model or variable pulls).
ACTOR_ROWS = {
    'int8': ('int8', 100),
    'fp16': ('fp16', 100),
    'fp32': ('fp32', 100),
    'tf': ('tf', 1),  # TF-Agents' stock behaviour: pull every step.
    'tf_pull_100': ('tf', 100),
}
ROW_NAMES = {
    ENV_ONLY: 'env only (random actions, no policy, no Reverb)',
    ENV_ONLY_TF_AGENTS: "env only, through TF-Agents' PyEnvironment",
    'int8': 'int8 TFLite actor (pull every 100 steps)',
    'fp16': 'fp16 TFLite actor (pull every 100 steps)',
    'fp32': 'fp32 TFLite actor (pull every 100 steps)',
    'tf': 'tf actor, stock (variables pulled every step)',
    'tf_pull_100': 'tf actor (variables pulled every 100 steps)',
}


def unthrottled_tables(env):
  tables = server.create_tables(env)
  replay_signature = tables[0].info.signature
  tables[0] = reverb.Table(
      replay.REPLAY_TABLE, reverb.selectors.Uniform(),
      reverb.selectors.Fifo(), max_size=100_000,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=replay_signature)
  return tables


def publish_all_precisions(address, env, key_file):
  """Publishes a model of every TFLite precision, signed with the key in
  `key_file`; returns them by precision."""
  client = model_channel.wait_for_server(address, 10)
  publisher = model_channel.ModelPublisher(client,
                                           signing.run_key('', key_file))
  algorithm = agents.check_environment(env)
  policy_network = algorithm.policy_network(env)
  exporter = export.PolicyExporter(
      policy_network, algorithm.model_outputs(env),
      ['int8', 'fp16', 'fp32'], publisher.publish_exports, tempfile.mkdtemp())
  results = exporter.export(1, environments.random_walk_observations(env, 256))
  failed = [f'{r.precision}: {r.check.reason}' for r in results
            if not r.check.passed]
  if failed:
    raise ActorQError(f'models not published, actors would act at random: '
                      f'{failed}')
  # Each row's model is the precision it names.
  for result in results:
    model_checks.check_precision(result.model_bytes, result.precision,
                           policy_network.count_params(),
                           pixel_input=conversion.takes_pixels(policy_network))
  return {r.precision: r for r in results}


def _env_only(env, steps, direct=True):
  """Env steps/s under random actions, stepped as actors step (`direct`) or
  through TF-Agents' PyEnvironment."""
  rng = np.random.default_rng(0)
  spec = env.action_spec()
  if environments.is_discrete(env):
    actions = rng.integers(spec.minimum, spec.maximum + 1, steps)
  else:
    actions = rng.uniform(spec.minimum, spec.maximum, (steps,) + spec.shape)
  actions = actions.astype(spec.dtype)
  if direct:
    stepper = environments.DirectSteps(env)
    stepper.reset()
    start = time.perf_counter()
    for action in actions:
      if stepper.step(action)[3]:
        stepper.reset()
  else:
    env.reset()
    start = time.perf_counter()
    for action in actions:
      if env.step(action).is_last():
        env.reset()
  return steps / (time.perf_counter() - start)


def actor_rate(address, precision, steps, pull_interval, key_file):
  """(env steps/s of the actor's loop, its status at the end)."""
  root_dir = tempfile.mkdtemp()
  # Epsilon at its final value from the first step: the policy is measured.
  with gin.unlock_config():
    gin.bind_parameter('epsilon_greedy.decay_steps', 0)
  actor.run_actor(root_dir, address, precision=precision,
                  max_env_steps=steps, model_pull_interval=pull_interval,
                  wait_for_first_model_s=120, model_key_file=key_file)
  status = run_directory.read_status(root_dir, 'actor_0')
  if status.model_share < MIN_MODEL_SHARE:
    raise ActorQError(
        f'{precision} actor: only {status.model_share:.3f} of its steps '
        f'came from a model (at least {MIN_MODEL_SHARE} needed); refusals: '
        f'{status.last_refusal or "none"}')
  return status.env_steps / status.loop_seconds, status


def measure(env_steps: int, repeats: int) -> dict:
  """Steps/s per row for the experiment the parsed gin config describes."""
  env = environments.load_environment()
  reverb_server = reverb.Server(unthrottled_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  try:
    key_file = os.path.join(tempfile.mkdtemp(), signing.KEY_FILE)
    signing.run_key(os.path.dirname(key_file))  # Makes it.
    models = publish_all_precisions(address, env, key_file)
    observations = environments.random_walk_observations(env, 50)
    measurements = {
        ENV_ONLY: lambda: (_env_only(env, 2 * env_steps), None),
        ENV_ONLY_TF_AGENTS: lambda: (_env_only(env, 2 * env_steps, False),
                                     None)}
    for row, (precision, pull_interval) in ACTOR_ROWS.items():
      steps = env_steps // 4 if precision == 'tf' else env_steps
      measurements[row] = (lambda p=precision, s=steps, i=pull_interval:
                           actor_rate(address, p, s, i, key_file))
    # Rows take turns, so drift in the machine's speed hits every row alike.
    samples = {row: [] for row in measurements}
    statuses = {row: [] for row in ACTOR_ROWS}
    invoke_samples = {precision: [] for precision in models}
    for _ in range(repeats):
      for row, run in measurements.items():
        rate, status = run()
        samples[row].append(rate)
        if status is not None:
          statuses[row].append(status)
      for precision, result in models.items():
        invoke_samples[precision].append(common.seconds_per_call(
            common.invoke_only(result.model_bytes), observations, 500))
  finally:
    reverb_server.stop()
  rates = {row: float(np.median(s)) for row, s in samples.items()}
  invoke_us = {p: float(np.median(s)) * 1e6
               for p, s in invoke_samples.items()}
  env_step_us = 1e6 / rates[ENV_ONLY]
  return {
      **common.describe(
          env, agents.check_environment(env).policy_network(env)),
      'env_steps': env_steps, 'repeats': repeats,
      'steps_per_second': rates,
      'samples': samples,
      'model_share': {row: min(s.model_share for s in row_statuses)
                      for row, row_statuses in statuses.items()},
      # Where the actor's loop spends its time, from its own clock (median).
      'time_share': {row: {part: float(np.median([s.time_share[part]
                                                  for s in row_statuses]))
                           for part in row_statuses[0].time_share}
                     for row, row_statuses in statuses.items()},
      'invoke_us': invoke_us,
      # (env step + invoke) / actor step, for the TFLite rows.
      'efficiency': {p: (env_step_us + invoke_us[p]) * rates[p] / 1e6
                     for p in models},
      'model_bytes': {p: len(r.model_bytes) for p, r in models.items()},
  }


def print_table(figures: dict) -> None:
  rates = figures['steps_per_second']
  print(f'\nActor env steps/s, {figures["environment"]}, {figures["network"]}'
        f', median of {figures["repeats"]}, one process, this machine:')
  for row, rate in rates.items():
    share = figures['model_share'].get(row)
    efficiency = figures['efficiency'].get(row)
    time_share = figures['time_share'].get(row)
    print(f'  {ROW_NAMES[row]:52s} {rate:10,.0f}   int8 / this = '
          f'{rates["int8"] / rate:6.2f}' +
          ('' if share is None else f'   model share {share:.3f}') +
          ('' if efficiency is None else f'   efficiency {efficiency:.2f}') +
          ('' if time_share is None else '   time ' + ' '.join(
              f'{part} {value:.2f}' for part, value in time_share.items())))
  print('Invoke us:', json.dumps({p: round(us, 1) for p, us in
                                  figures['invoke_us'].items()}))
  print('Model bytes:', json.dumps(figures['model_bytes']))


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings +
                   ['actor_epsilon.base_epsilon = 0.0'])
  figures = measure(FLAGS.env_steps, FLAGS.repeats)
  print_table(figures)
  if FLAGS.output_json:
    common.write_json(FLAGS.output_json, figures)


if __name__ == '__main__':
  app.run(main)
