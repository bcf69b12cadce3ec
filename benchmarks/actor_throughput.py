"""Actor env steps/s per precision, side by side in one process and run.

Each actor does the real work (env step, policy, epsilon-greedy, Reverb
write) against a real Reverb server whose replay never blocks inserts, so
the figure is the actor's own speed. The env-only loop is the limit.

  .venv/bin/python -m benchmarks.actor_throughput [--env_steps 20000]
"""
import json
import os
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

flags.DEFINE_multi_string('gin_file', ['dqn_cartpole.gin'], 'Experiment.')
flags.DEFINE_multi_string('gin_bindings', [], 'gin bindings.')
flags.DEFINE_integer('env_steps', 20_000, 'Env steps per measurement.')
flags.DEFINE_integer('repeats', 3, 'Measurements per row; the median counts.')
FLAGS = flags.FLAGS


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
  q_network = networks.policy_network_for(env)
  rng = np.random.default_rng(0)
  observations = []
  time_step = env.reset()
  while len(observations) < 256:
    observations.append(time_step.observation)
    time_step = env.step(np.asarray(rng.integers(2), env.action_spec().dtype))

  exporter = export.PolicyExporter(q_network, env.action_spec(),
                                   ['int8', 'fp16', 'fp32'],
                                   publisher.publish_exports,
                                   tempfile.mkdtemp())
  return {r.precision: len(r.model_bytes)
          for r in exporter.export(1, np.array(observations))}


def _env_only(env, steps):
  rng = np.random.default_rng(0)
  dtype = env.action_spec().dtype
  env.reset()
  start = time.perf_counter()
  for _ in range(steps):
    env.step(np.asarray(rng.integers(2), dtype))
  return steps / (time.perf_counter() - start)


def _actor(address, precision, steps, pull_interval):
  root_dir = tempfile.mkdtemp()
  start = time.perf_counter()
  # Epsilon 0 after the first step: every step runs the policy.
  actor.run_actor(root_dir, address, precision=precision,
                  max_env_steps=steps, model_pull_interval=pull_interval,
                  epsilon_decay_steps=0)
  return steps / (time.perf_counter() - start)


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings +
                   ['actor_epsilon.base_epsilon = 0.0'])
  env = environments.load_environment()
  reverb_server = reverb.Server(_unthrottled_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  model_bytes = _publish_all_precisions(address, env)

  rows = [('env only (random actions, no policy, no Reverb)',
           lambda: _env_only(env, FLAGS.env_steps))]
  for precision in ('int8', 'fp16', 'fp32'):
    rows.append((f'{precision} TFLite actor (pull every 100 steps)',
                 lambda p=precision: _actor(address, p, FLAGS.env_steps, 100)))
  rows.append(('tf actor, stock (variables pulled every step)',
               lambda: _actor(address, 'tf', FLAGS.env_steps // 4, 1)))
  rows.append(('tf actor (variables pulled every 100 steps)',
               lambda: _actor(address, 'tf', FLAGS.env_steps // 4, 100)))

  results = {}
  for name, measure in rows:
    results[name] = float(np.median([measure() for _ in range(FLAGS.repeats)]))
  reverb_server.stop()

  int8 = results['int8 TFLite actor (pull every 100 steps)']
  print(f'\nActor env steps/s, {os.path.basename(FLAGS.gin_file[-1])}, '
        f'median of {FLAGS.repeats}, one process, this machine:')
  for name, rate in results.items():
    print(f'  {name:52s} {rate:10,.0f}   int8 / this = {int8 / rate:5.2f}')
  print('Model bytes:', json.dumps(model_bytes))


if __name__ == '__main__':
  app.run(main)
