"""The first traced call of a Q-network, with and without autograph's rule
for tf_keras (`networks._keep_autograph_out_of_tf_keras`), each in a fresh
process, side by side. What every learner, evaluator and exporter pays once
per traced function.

  .venv/bin/python -m benchmarks.first_trace --repeats 2
"""
import subprocess
import sys
import time

from absl import app
from absl import flags

flags.DEFINE_integer('repeats', 2, 'Fresh processes per setting.')
flags.DEFINE_string('fc_layer_params', '256,256', 'The Q-network\'s layers.')

_RULE = 'DoNotConvert rule for tf_keras'

# One process: the library's Q-network, traced and called twice.
_MEASURE = '''
import sys, time
from actorq_tf import networks
import tensorflow as tf
from tensorflow.python.autograph.core import config as autograph_config
from tf_agents.specs import tensor_spec
if sys.argv[1] == 'without':
  autograph_config.CONVERSION_RULES = tuple(
      r for r in autograph_config.CONVERSION_RULES if str(r) != sys.argv[2])
assert (sys.argv[1] == 'with') == any(
    str(r) == sys.argv[2] for r in autograph_config.CONVERSION_RULES)
assert tf.keras.layers.Dense.__module__.startswith('tf_keras')
network = networks.create_q_network(
    tensor_spec.TensorSpec([4], tf.float32), 2,
    fc_layer_params=[int(u) for u in sys.argv[3].split(',')])
q_values = tf.function(lambda observation: network(observation)[0])
for _ in range(2):
  start = time.perf_counter()
  q_values(tf.zeros([1, 4]))
  print(time.perf_counter() - start)
'''


def _measure(setting: str, fc_layer_params: str):
  output = subprocess.run(
      [sys.executable, '-c', _MEASURE, setting, _RULE, fc_layer_params],
      capture_output=True, text=True, check=True, timeout=600).stdout
  first, second = (float(line) for line in output.split())
  return first, second


def main(_):
  flags_ = flags.FLAGS
  firsts = {'without': [], 'with': []}
  for _ in range(flags_.repeats):
    for setting in ('without', 'with'):
      first, second = _measure(setting, flags_.fc_layer_params)
      firsts[setting].append(first)
      print(f'{setting} the rule: first call {first:.2f} s, second '
            f'{second * 1e3:.2f} ms', flush=True)
  best = {setting: min(values) for setting, values in firsts.items()}
  print(f'{time.strftime("%Y-%m-%d %H:%M")}: first traced call, best of '
        f'{flags_.repeats}: without {best["without"]:.2f} s, with '
        f'{best["with"]:.2f} s; without / with = '
        f'{best["without"] / best["with"]:.2f}')


if __name__ == '__main__':
  app.run(main)
