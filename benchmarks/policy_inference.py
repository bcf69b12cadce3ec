"""Batch-1 policy inference per precision, side by side in one process.

What an actor pays per env step for its policy: TF-Agents' stock policy
(`tf`: PyTFEagerPolicy over the fp32 network, as the `tf` actors run it) and
the TFLite models called as the actors call them (normalize and quantize the
observation, invoke with one interpreter thread, dequantize): fp32, fp16,
dynamic-range int8 (int8 weights, float activations) and full int8. Also
each model's bytes and conversion time. Observations come from the
environment.

  .venv/bin/python -m benchmarks.policy_inference \\
      --gin_file d4pg_walker_stand.gin \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import json
import os
import time

from absl import app
from absl import flags
import gin
import numpy as np

from actorq_tf import actor
from actorq_tf import config
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import networks
from actorq_tf.tflite_policy import ObservationNormalizer
from actorq_tf.tflite_policy import TFLiteModel

flags.DEFINE_multi_string('gin_file', ['d4pg_walker_stand.gin'], 'Experiment.')
flags.DEFINE_multi_string('gin_bindings', [], 'gin bindings.')
flags.DEFINE_integer('calls', 2000, 'Policy calls per measurement.')
flags.DEFINE_integer('repeats', 5, 'Measurements per row; the median counts.')
flags.DEFINE_string('output_json', None, 'Also write the figures here.')
FLAGS = flags.FLAGS

# Rows in the order the report shows them.
PRECISIONS = ('tf', 'fp32', 'fp16', export.DYNAMIC_RANGE_INT8, 'int8')


def random_walk_observations(env, count: int) -> np.ndarray:
  """Observations of an episode under uniformly random actions."""
  rng = np.random.default_rng(0)
  spec = env.action_spec()
  observations = []
  time_step = env.reset()
  while len(observations) < count:
    observations.append(time_step.observation)
    if environments.is_discrete(env):
      action = rng.integers(spec.minimum, spec.maximum + 1)
    else:
      action = rng.uniform(spec.minimum, spec.maximum, spec.shape)
    time_step = env.step(np.asarray(action, spec.dtype))
    if time_step.is_last():
      time_step = env.reset()
  return np.array(observations, np.float32)


def _seconds_per_call(act, inputs, calls, repeats):
  for item in inputs[:50]:  # warm-up: tracing, allocation, caches
    act(item)
  measurements = []
  for _ in range(repeats):
    start = time.perf_counter()
    for i in range(calls):
      act(inputs[i % len(inputs)])
    measurements.append((time.perf_counter() - start) / calls)
  return float(np.median(measurements))


def measure(calls: int, repeats: int) -> dict:
  """Figures per precision for the network the parsed gin config builds."""
  env = environments.load_environment()
  discrete = environments.is_discrete(env)
  policy_network = networks.policy_network_for(env)
  observations = random_walk_observations(env, 512)
  normalizer = ObservationNormalizer.from_observations(observations)
  layers = [layer.units for layer in policy_network.layers
            if hasattr(layer, 'units')]

  # The exporter's own transformation (normalization folded in), on a copy.
  exported = policy_network.copy(name='Exported')
  exported.create_variables(policy_network.input_tensor_spec)
  exported.set_weights(policy_network.get_weights())
  if discrete:
    export.centre_q_values(exported)
  export.fold_normalization(exported, normalizer)

  rows = {}
  for precision in PRECISIONS[1:]:
    start = time.perf_counter()
    model_bytes = export.convert(exported, precision,
                                 normalizer(observations))
    convert_seconds = time.perf_counter() - start
    model = TFLiteModel(model_bytes, normalizer)
    act = model.greedy_action if discrete else model.action
    rows[precision] = {
        'us_per_call': 1e6 * _seconds_per_call(act, observations, calls,
                                               repeats),
        'bytes': len(model_bytes), 'convert_s': convert_seconds}

  stock = actor.stock_greedy_policy(env, policy_network)
  time_steps = []
  env.reset()
  for _ in range(64):
    time_steps.append(env.step(
        np.asarray(env.action_spec().minimum, env.action_spec().dtype)))
  rows['tf'] = {
      'us_per_call': 1e6 * _seconds_per_call(
          stock.action, time_steps, max(100, calls // 4), repeats),
      # What a tf actor pulls: the fp32 variables.
      'bytes': int(sum(v.numpy().nbytes for v in policy_network.variables)),
      'convert_s': 0.0}
  return {
      'environment': gin.query_parameter('load_environment.env_name'),
      'network': (f'{env.observation_spec().shape[0]} -> '
                  f'{"x".join(map(str, layers))}'),
      'calls': calls, 'repeats': repeats,
      'rows': {p: rows[p] for p in PRECISIONS}}


def print_table(figures: dict) -> None:
  print(f'\nBatch-1 policy inference, {figures["environment"]}, '
        f'{figures["network"]}, median of {figures["repeats"]} x '
        f'{figures["calls"]} calls, one process, this machine:')
  print(f'  {"precision":13s} {"us/call":>10s} {"int8 / this":>12s} '
        f'{"bytes":>12s} {"convert s":>10s}')
  int8_us = figures['rows']['int8']['us_per_call']
  for precision, row in figures['rows'].items():
    print(f'  {precision:13s} {row["us_per_call"]:10.1f} '
          f'{int8_us / row["us_per_call"]:12.3f} {row["bytes"]:12,d} '
          f'{row["convert_s"]:10.2f}')
  print('  (tf bytes: the fp32 variables a tf actor pulls)')


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  figures = measure(FLAGS.calls, FLAGS.repeats)
  print_table(figures)
  if FLAGS.output_json:
    with open(FLAGS.output_json, 'w') as f:
      json.dump(figures, f, indent=1)


if __name__ == '__main__':
  app.run(main)
