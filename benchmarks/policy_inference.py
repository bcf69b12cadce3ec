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
import tempfile

from absl import app
from absl import flags
import numpy as np

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import config
from actorq_tf import conversion
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_checks
from actorq_tf.interpreter import TFLiteModel
from benchmarks import common

common.define_flags('d4pg_walker_stand.gin')
flags.DEFINE_integer('calls', 2000, 'Policy calls per measurement.')
flags.DEFINE_integer('repeats', 5, 'Measurements per row; the median counts.')
FLAGS = flags.FLAGS

# Rows in the order the report shows them.
PRECISIONS = ('tf', 'fp32', 'fp16', conversion.DYNAMIC_RANGE_INT8, 'int8',
              conversion.INT4_WEIGHTS)


def measure(calls: int, repeats: int) -> dict:
  """Figures per precision for the network the parsed gin config builds."""
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  policy_network = algorithm.policy_network(env)
  observations = environments.random_walk_observations(env, 512)

  # The learner's own export path (snapshot, centring and scaling of
  # Q-values, folded normalization, equalization, conversion), so that
  # each row is the model an actor of that precision would run. Nothing is
  # published; the check's verdict on an untrained network does not matter.
  with tempfile.TemporaryDirectory() as model_dir:
    exporter = export.PolicyExporter(policy_network,
                                     algorithm.model_outputs(env),
                                     PRECISIONS[1:], lambda *_: None,
                                     model_dir)
    results = {r.precision: r for r in exporter.export(0, observations)}

  rows = {'tf': {
      # What a tf actor pulls: the fp32 variables.
      'bytes': int(sum(v.numpy().nbytes for v in policy_network.variables)),
      'convert_s': 0.0}}
  # Measurement -> (callable, inputs, calls).
  measurements = {}
  for precision in PRECISIONS[1:]:
    model_bytes = results[precision].model_bytes
    rows[precision] = {'bytes': len(model_bytes),
                       'convert_s': results[precision].convert_seconds}
    # A figure is only worth its name: the model must be that precision.
    model_checks.check_precision(model_bytes, precision,
                           policy_network.count_params(),
                           pixel_input=conversion.takes_pixels(policy_network))
    rows[precision]['op_types'] = sorted(set(
        TFLiteModel(model_bytes).op_names()))
    model = TFLiteModel(model_bytes, results[precision].normalizer)
    measurements[(precision, 'us_per_call')] = (
        algorithm.model_policy(model), observations, calls)
    measurements[(precision, 'invoke_us')] = (
        common.invoke_only(model_bytes), observations, calls)

  stock = actor.stock_greedy_policy(env, policy_network, algorithm)
  time_steps = []
  env.reset()
  for _ in range(64):
    time_steps.append(env.step(
        np.asarray(env.action_spec().minimum, env.action_spec().dtype)))
  measurements[('tf', 'us_per_call')] = (stock.action, time_steps,
                                         max(100, calls // 4))
  rows['tf']['invoke_us'] = None

  for act, inputs, _ in measurements.values():
    # Warm-up: tracing, allocation, caches.
    common.seconds_per_call(act, inputs, 50)
  # Rows take turns, so drift in the machine's speed hits every row alike.
  samples = {key: [] for key in measurements}
  for _ in range(repeats):
    for key, (act, inputs, count) in measurements.items():
      samples[key].append(common.seconds_per_call(act, inputs, count))
  for (precision, figure), seconds in samples.items():
    rows[precision][figure] = 1e6 * float(np.median(seconds))
  return {
      **common.describe(env, policy_network),
      'calls': calls, 'repeats': repeats,
      'rows': {p: rows[p] for p in PRECISIONS}}


def print_table(figures: dict) -> None:
  print(f'\nBatch-1 policy inference, {figures["environment"]}, '
        f'{figures["network"]}, median of {figures["repeats"]} x '
        f'{figures["calls"]} calls, one process, this machine:')
  print(f'  {"precision":13s} {"us/call":>10s} {"int8 / this":>12s} '
        f'{"invoke us":>10s} {"bytes":>12s} {"convert s":>10s}')
  int8_us = figures['rows']['int8']['us_per_call']
  for precision, row in figures['rows'].items():
    invoke = ('-' if row['invoke_us'] is None else
              f'{row["invoke_us"]:.1f}')
    print(f'  {precision:13s} {row["us_per_call"]:10.1f} '
          f'{int8_us / row["us_per_call"]:12.3f} {invoke:>10s} '
          f'{row["bytes"]:12,d} {row["convert_s"]:10.2f}')
  print('  (us/call: as an actor calls it, observation in, action out; '
        'invoke us: the interpreter alone; tf bytes: the fp32 variables a '
        'tf actor pulls)')


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  figures = measure(FLAGS.calls, FLAGS.repeats)
  print_table(figures)
  if FLAGS.output_json:
    common.write_json(FLAGS.output_json, figures)


if __name__ == '__main__':
  app.run(main)
