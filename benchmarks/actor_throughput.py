"""Actor env steps/s per precision, side by side in one process and run.

Each actor does the real work (env step, policy, exploration, Reverb
writes) against a real Reverb server whose replay never blocks inserts, so
the figure is the actor's own speed. The env-only loop (random actions, no
policy, no Reverb) is the limit an actor can approach.

  .venv/bin/python -m benchmarks.actor_throughput [--env_steps 20000]
  .venv/bin/python -m benchmarks.actor_throughput \\
      --gin_file d4pg_walker_stand.gin --env_steps 3000 \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import json
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import reverb

from actorq_tf import actor
from actorq_tf import config
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import networks
from actorq_tf import replay
from actorq_tf import server
from actorq_tf.errors import ActorQError
from benchmarks import common

common.define_flags('dqn_cartpole.gin')
flags.DEFINE_integer('env_steps', 20_000, 'Env steps per TFLite measurement; '
                     'tf actors take a quarter, env-only twice as many.')
flags.DEFINE_integer('repeats', 3, 'Measurements per row; the median counts.')
FLAGS = flags.FLAGS

ENV_ONLY = 'env_only'
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
    'int8': 'int8 TFLite actor (pull every 100 steps)',
    'fp16': 'fp16 TFLite actor (pull every 100 steps)',
    'fp32': 'fp32 TFLite actor (pull every 100 steps)',
    'tf': 'tf actor, stock (variables pulled every step)',
    'tf_pull_100': 'tf actor (variables pulled every 100 steps)',
}


def _unthrottled_tables(env):
  tables = server.create_tables(env)
  replay_signature = tables[0].info.signature
  tables[0] = reverb.Table(
      replay.REPLAY_TABLE, reverb.selectors.Uniform(),
      reverb.selectors.Fifo(), max_size=100_000,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=replay_signature)
  return tables


def _publish_all_precisions(address, env):
  client = model_channel.wait_for_server(address, 10)
  publisher = model_channel.ModelPublisher(client)
  exporter = export.PolicyExporter(
      networks.policy_network_for(env), env.action_spec(),
      ['int8', 'fp16', 'fp32'], publisher.publish_exports, tempfile.mkdtemp())
  results = exporter.export(1, common.random_walk_observations(env, 256))
  failed = [f'{r.precision}: {r.check.reason}' for r in results
            if not r.check.passed]
  if failed:
    raise ActorQError(f'models not published, actors would act at random: '
                      f'{failed}')
  return {r.precision: len(r.model_bytes) for r in results}


def _env_only(env, steps):
  rng = np.random.default_rng(0)
  spec = env.action_spec()
  if environments.is_discrete(env):
    actions = rng.integers(spec.minimum, spec.maximum + 1, steps)
  else:
    actions = rng.uniform(spec.minimum, spec.maximum, (steps,) + spec.shape)
  actions = actions.astype(spec.dtype)
  env.reset()
  start = time.perf_counter()
  for action in actions:
    if env.step(action).is_last():
      env.reset()
  return steps / (time.perf_counter() - start)


def _actor(address, precision, steps, pull_interval):
  start = time.perf_counter()
  actor.run_actor(tempfile.mkdtemp(), address, precision=precision,
                  max_env_steps=steps, model_pull_interval=pull_interval,
                  epsilon_decay_steps=0)
  return steps / (time.perf_counter() - start)


def measure(env_steps: int, repeats: int) -> dict:
  """Steps/s per row for the experiment the parsed gin config describes."""
  env = environments.load_environment()
  reverb_server = reverb.Server(_unthrottled_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  try:
    model_bytes = _publish_all_precisions(address, env)
    measurements = {ENV_ONLY: lambda: _env_only(env, 2 * env_steps)}
    for row, (precision, pull_interval) in ACTOR_ROWS.items():
      steps = env_steps // 4 if precision == 'tf' else env_steps
      measurements[row] = (lambda p=precision, s=steps, i=pull_interval:
                           _actor(address, p, s, i))
    # Rows take turns, so drift in the machine's speed hits every row alike.
    samples = {row: [] for row in measurements}
    for _ in range(repeats):
      for row, run in measurements.items():
        samples[row].append(run())
  finally:
    reverb_server.stop()
  return {
      **common.describe(env, networks.policy_network_for(env)),
      'env_steps': env_steps, 'repeats': repeats,
      'steps_per_second': {row: float(np.median(s))
                           for row, s in samples.items()},
      'samples': samples,
      'model_bytes': model_bytes,
  }


def print_table(figures: dict) -> None:
  rates = figures['steps_per_second']
  print(f'\nActor env steps/s, {figures["environment"]}, {figures["network"]}'
        f', median of {figures["repeats"]}, one process, this machine:')
  for row, rate in rates.items():
    print(f'  {ROW_NAMES[row]:52s} {rate:10,.0f}   int8 / this = '
          f'{rates["int8"] / rate:5.2f}')
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
