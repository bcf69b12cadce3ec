"""Actor env steps/s per precision, side by side in one process and run.

Each actor does the real work (env step, policy, exploration, Reverb
writes) against a real Reverb server whose replay never blocks inserts, so
the figure is the actor's own speed. Each row proves what it measures: the
actor waits for its first model, its rate counts only its env loop, and
the share of its steps that the model chose must be at least 0.99.

The env-only loop (random actions, no policy, no Reverb, stepping the
environment the way actors do) and the interpreter's invoke time are the
limit an actor can approach: efficiency = (env step time + invoke time) /
actor step time. Rows of actors with N environments (`--envs_per_actor`)
count the invoke time per observation of a batch of N, and are measured
for int8 and fp32: batching helps both.

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
import tensorflow as tf
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType

from actorq_tf import TFLITE_PRECISIONS
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
flags.DEFINE_integer('envs_per_actor', 4, 'Environments of the many-'
                     'environment rows (int8 and fp32); 1 leaves them out.')
FLAGS = flags.FLAGS

ENV_ONLY = 'env_only'
ENV_ONLY_TF_AGENTS = 'env_only_tf_agents'
REPLAY_ONLY = 'replay_only'
MIN_MODEL_SHARE = 0.99
# Row -> (actor precision, env steps between model or variable pulls).
ACTOR_ROWS = {
    'int8': ('int8', 100),
    'fp16': ('fp16', 100),
    'fp32': ('fp32', 100),
    'int4_weights': ('int4_weights', 100),
    'tf': ('tf', 1),  # TF-Agents' stock behaviour: pull every step.
    'tf_pull_100': ('tf', 100),
}
# Precisions measured with N environments per actor as well.
MANY_ENVIRONMENT_PRECISIONS = ('int8', 'fp32')
ROW_NAMES = {
    ENV_ONLY: 'env only (random actions, no policy, no Reverb)',
    ENV_ONLY_TF_AGENTS: "env only, through TF-Agents' PyEnvironment",
    REPLAY_ONLY: 'replay writes only (no env step, no policy)',
    'int8': 'int8 TFLite actor (pull every 100 steps)',
    'fp16': 'fp16 TFLite actor (pull every 100 steps)',
    'fp32': 'fp32 TFLite actor (pull every 100 steps)',
    'int4_weights': 'int4_weights TFLite actor (pull every 100 steps)',
    'tf': 'tf actor, stock (variables pulled every step)',
    'tf_pull_100': 'tf actor (variables pulled every 100 steps)',
}


def many_environments_row(precision: str, envs_per_actor: int) -> str:
  return f'{precision}_{envs_per_actor}_envs'


def row_name(row: str) -> str:
  if row in ROW_NAMES:
    return ROW_NAMES[row]
  precision, envs, _ = row.split('_')
  return f'{precision} TFLite actor, {envs} environments'


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
      TFLITE_PRECISIONS, publisher.publish_exports, tempfile.mkdtemp())
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


def _random_actions(env, steps):
  rng = np.random.default_rng(0)
  spec = env.action_spec()
  if environments.is_discrete(env):
    actions = rng.integers(spec.minimum, spec.maximum + 1, steps)
  else:
    actions = rng.uniform(spec.minimum, spec.maximum, (steps,) + spec.shape)
  return actions.astype(spec.dtype)


def _env_only(env, steps, direct=True):
  """Env steps/s under random actions, stepped as actors step (`direct`) or
  through TF-Agents' PyEnvironment."""
  actions = _random_actions(env, steps)
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


def _replay_only(address, env, steps, key_file):
  """Env steps/s that the actor's replay writer alone takes: the steps of a
  random walk, episode boundaries included, made beforehand and written as
  an actor writes them, to the same server. The floor of an actor's step
  time wherever Reverb's per-item cost exceeds the env step and invoke."""
  spec = env.action_spec()
  boundary_action = np.broadcast_to(spec.minimum, spec.shape).astype(
      spec.dtype)
  first, mid, last_type = (np.asarray(t, np.int32) for t in
                           (StepType.FIRST, StepType.MID, StepType.LAST))
  stepper = environments.DirectSteps(env)
  observation, step_type = stepper.reset(), first
  steps_written = []
  for action in _random_actions(env, steps):
    next_observation, reward, discount, last = stepper.step(action)
    steps_written.append(trajectory_lib.Trajectory(
        step_type, observation, action, (), last_type if last else mid,
        reward, discount))
    if last:
      steps_written.append(trajectory_lib.Trajectory(
          last_type, next_observation, boundary_action, (), first,
          np.float32(0), np.float32(1)))
      observation, step_type = stepper.reset(), first
    else:
      observation, step_type = next_observation, mid
  writer = replay.replay_observer(reverb.Client(address),
                                  signing.run_key('', key_file))
  start = time.perf_counter()
  for step in steps_written:
    writer.write(step)
  writer.close()
  return steps / (time.perf_counter() - start)


def actor_rate(address, precision, steps, pull_interval, key_file,
               envs_per_actor=1):
  """(env steps/s of the actor's loop, its status at the end)."""
  root_dir = tempfile.mkdtemp()
  # Epsilon at its final value from the first step: the policy is measured.
  with gin.unlock_config():
    gin.bind_parameter('epsilon_greedy.decay_steps', 0)
  actor.run_actor(root_dir, address, precision=precision,
                  max_env_steps=steps, model_pull_interval=pull_interval,
                  wait_for_first_model_s=120, model_key_file=key_file,
                  envs_per_actor=envs_per_actor)
  status = run_directory.read_status(root_dir, 'actor_0')
  if status.environments != envs_per_actor:
    raise ActorQError(f'the actor stepped {status.environments} '
                      f'environments, not {envs_per_actor}')
  if status.model_share < MIN_MODEL_SHARE:
    raise ActorQError(
        f'{precision} actor: only {status.model_share:.3f} of its steps '
        f'came from a model (at least {MIN_MODEL_SHARE} needed); refusals: '
        f'{status.last_refusal or "none"}')
  return status.env_steps / status.loop_seconds, status


def invoke_us_per_observation(model_bytes: bytes, batch: int,
                              calls: int = 500) -> float:
  """The interpreter's invoke alone, at `batch` observations, per
  observation."""
  interpreter = tf.lite.Interpreter(model_content=model_bytes, num_threads=1)
  index = interpreter.get_input_details()[0]['index']
  shape = interpreter.get_input_details()[0]['shape']
  interpreter.resize_tensor_input(index, [batch, *shape[1:]])
  interpreter.allocate_tensors()
  return common.seconds_per_call(lambda _: interpreter.invoke(), [None],
                                 calls) * 1e6 / batch


def measure(env_steps: int, repeats: int, envs_per_actor: int = 1) -> dict:
  """Steps/s per row for the experiment the parsed gin config describes."""
  env = environments.load_environment()
  reverb_server = reverb.Server(unthrottled_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  try:
    key_file = os.path.join(tempfile.mkdtemp(), signing.KEY_FILE)
    signing.run_key(os.path.dirname(key_file))  # Makes it.
    models = publish_all_precisions(address, env, key_file)
    measurements = {
        ENV_ONLY: lambda: (_env_only(env, 2 * env_steps), None),
        ENV_ONLY_TF_AGENTS: lambda: (_env_only(env, 2 * env_steps, False),
                                     None),
        REPLAY_ONLY: lambda: (_replay_only(address, env, env_steps,
                                           key_file), None)}
    actor_rows = {row: (precision, pull_interval, 1)
                  for row, (precision, pull_interval) in ACTOR_ROWS.items()}
    if envs_per_actor > 1:
      actor_rows.update({
          many_environments_row(precision, envs_per_actor): (
              precision, ACTOR_ROWS[precision][1], envs_per_actor)
          for precision in MANY_ENVIRONMENT_PRECISIONS})
    for row, (precision, pull_interval, envs) in actor_rows.items():
      steps = env_steps // 4 if precision == 'tf' else env_steps
      measurements[row] = (
          lambda p=precision, s=steps, i=pull_interval, n=envs:
          actor_rate(address, p, s, i, key_file, n))
    # TFLite rows: (model, observations per invoke).
    invoked = {row: (models[precision], envs)
               for row, (precision, _, envs) in actor_rows.items()
               if precision in models}
    # Rows take turns, so drift in the machine's speed hits every row alike.
    samples = {row: [] for row in measurements}
    statuses = {row: [] for row in actor_rows}
    invoke_samples = {row: [] for row in invoked}
    for _ in range(repeats):
      for row, run in measurements.items():
        rate, status = run()
        samples[row].append(rate)
        if status is not None:
          statuses[row].append(status)
      for row, (result, batch) in invoked.items():
        invoke_samples[row].append(
            invoke_us_per_observation(result.model_bytes, batch))
  finally:
    reverb_server.stop()
  rates = {row: float(np.median(s)) for row, s in samples.items()}
  # Per observation, at the row's batch.
  invoke_us = {row: float(np.median(s)) for row, s in invoke_samples.items()}
  env_step_us = 1e6 / rates[ENV_ONLY]
  replay_step_us = 1e6 / rates[REPLAY_ONLY]
  return {
      **common.describe(
          env, agents.check_environment(env).policy_network(env)),
      'env_steps': env_steps, 'repeats': repeats,
      'envs_per_actor': envs_per_actor,
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
      'efficiency': {row: (env_step_us + invoke_us[row]) * rates[row] / 1e6
                     for row in invoked},
      # ... and with the replay writes' own time added: how close each
      # actor comes to all three done one after the other.
      'efficiency_with_replay': {
          row: (env_step_us + invoke_us[row] + replay_step_us) *
               rates[row] / 1e6 for row in invoked},
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
    print(f'  {row_name(row):52s} {rate:10,.0f}   int8 / this = '
          f'{rates["int8"] / rate:6.2f}' +
          ('' if share is None else f'   model share {share:.3f}') +
          ('' if efficiency is None else f'   efficiency {efficiency:.2f}, '
           f'with replay {figures["efficiency_with_replay"][row]:.2f}') +
          ('' if time_share is None else '   time ' + ' '.join(
              f'{part} {value:.2f}' for part, value in time_share.items())))
  print('Invoke us per observation:', json.dumps(
      {row: round(us, 1) for row, us in figures['invoke_us'].items()}))
  envs = figures.get('envs_per_actor', 1)
  if envs > 1:
    many = {p: rates[many_environments_row(p, envs)]
            for p in MANY_ENVIRONMENT_PRECISIONS}
    print(f'{envs} environments / 1, int8: {many["int8"] / rates["int8"]:.2f}'
          f'; int8 / fp32 at 1 environment: '
          f'{rates["int8"] / rates["fp32"]:.2f}, at {envs}: '
          f'{many["int8"] / many["fp32"]:.2f}')
  print('Model bytes:', json.dumps(figures['model_bytes']))


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings +
                   ['actor_epsilon.base_epsilon = 0.0'])
  figures = measure(FLAGS.env_steps, FLAGS.repeats, FLAGS.envs_per_actor)
  print_table(figures)
  if FLAGS.output_json:
    common.write_json(FLAGS.output_json, figures)


if __name__ == '__main__':
  app.run(main)
