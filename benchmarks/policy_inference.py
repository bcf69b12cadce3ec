"""Batch-1 policy inference per precision, side by side in one process.

What an actor pays per env step for its policy: TF-Agents' stock policy
(`tf`: PyTFEagerPolicy over the fp32 network, as the `tf` actors run it) and
the TFLite models called as the actors call them (normalize and quantize the
observation, invoke with one interpreter thread, dequantize). Also each
model's bytes and conversion time. Observations come from the environment.

  .venv/bin/python -m benchmarks.policy_inference \\
      --gin_file d4pg_walker_stand.gin \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import os
import time

from absl import app
from absl import flags
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
FLAGS = flags.FLAGS

TFLITE_ROWS = ('int8', 'fp16', 'fp32')


def _observations(env, count):
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
  return np.array(observations, np.float32)


def _seconds_per_call(act, inputs, calls, repeats):
  for item in inputs[:50]:  # warm-up: tracing, allocation, caches
    act(item)
  medians = []
  for _ in range(repeats):
    start = time.perf_counter()
    for i in range(calls):
      act(inputs[i % len(inputs)])
    medians.append((time.perf_counter() - start) / calls)
  return float(np.median(medians))


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  env = environments.load_environment()
  discrete = environments.is_discrete(env)
  policy_network = networks.policy_network_for(env)
  observations = _observations(env, 512)
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
  for precision in TFLITE_ROWS:
    start = time.perf_counter()
    model_bytes = export.convert(exported, precision,
                                 normalizer(observations))
    convert_seconds = time.perf_counter() - start
    model = TFLiteModel(model_bytes, normalizer)
    act = model.greedy_action if discrete else model.action
    rows[precision] = (_seconds_per_call(act, observations, FLAGS.calls,
                                         FLAGS.repeats),
                       len(model_bytes), convert_seconds)

  stock = actor.stock_greedy_policy(env, policy_network)
  time_steps = []
  env.reset()
  for _ in range(64):
    time_steps.append(env.step(
        np.asarray(env.action_spec().minimum, env.action_spec().dtype)))
  variables_bytes = sum(v.numpy().nbytes for v in policy_network.variables)
  rows['tf'] = (_seconds_per_call(lambda t: stock.action(t), time_steps,
                                  max(200, FLAGS.calls // 4), FLAGS.repeats),
                variables_bytes, 0.0)

  print(f'\nBatch-1 policy inference, {os.path.basename(FLAGS.gin_file[-1])}, '
        f'{env.observation_spec().shape[0]} -> '
        f'{"x".join(map(str, layers))}, median of {FLAGS.repeats} x '
        f'{FLAGS.calls} calls, one process, this machine:')
  print(f'  {"precision":10s} {"us/call":>10s} {"int8 / this":>12s} '
        f'{"bytes":>12s} {"convert s":>10s}')
  int8_seconds = rows['int8'][0]
  for precision, (seconds, size, convert_seconds) in rows.items():
    print(f'  {precision:10s} {seconds * 1e6:10.1f} '
          f'{int8_seconds / seconds:12.3f} {size:12,d} '
          f'{convert_seconds:10.2f}')
  print('  (tf bytes: the fp32 variables an actor pulls)')


if __name__ == '__main__':
  app.run(main)
