"""ActorQ-TF: distributed TF-Agents RL whose actors run int8 TFLite policies.

The parts a TF-Agents training script composes (see README, "Python API"):

  actor:    TFLitePyPolicy, StockPyPolicy, greedy_policy, collect_policy
  replay:   replay_observer, replay_dataset, Refusals
  learner:  create_export_trigger, ExportTrigger, export_policy
  channel:  ModelPublisher, ModelPuller, create_tables, start_server
  keys:     run_key, RunKey

They load on first use: `import actorq_tf` imports no TensorFlow.
"""
import importlib
import os
import sys
import warnings

# TensorFlow prints pages of C++ start-up logs per process; keep warnings and
# errors, drop the info lines. A user's own setting wins.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# One Keras 2 for every part of a process: TF-Agents, the user's code and
# tensorflow-model-optimization (whose wrappers refuse layers of the other
# package). tf.keras picks its package when first touched: tf_keras if
# TF_USE_LEGACY_KERAS is set then, else TensorFlow's own keras; tfmot sets
# the variable itself when imported. So: before TensorFlow is imported,
# tf_keras for all; after, whatever tf.keras is, settled now, before tfmot
# could set the variable under a tf.keras not yet touched (README, "What
# importing actorq_tf changes").
if 'tensorflow' in sys.modules:
  sys.modules['tensorflow'].keras.layers  # pylint: disable=pointless-statement
else:
  os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')

try:
  # gym prints a three-line "unmaintained" banner on import in every process;
  # tf-agents 0.19 needs gym 0.23, so the advice cannot be taken here.
  import gym_notices.notices  # pylint: disable=g-import-not-at-top
  gym_notices.notices.notices.clear()
except ImportError:
  pass

# Autograph compiles TF-Agents' `state is not ()` into a temporary file and
# Python warns about it in every learner and evaluator log.
warnings.filterwarnings('ignore', message='"is not" with a literal',
                        category=SyntaxWarning)

PRECISIONS = ('int8', 'fp16', 'fp32', 'int4_weights', 'tf')
TFLITE_PRECISIONS = ('int8', 'fp16', 'fp32', 'int4_weights')

# Public name -> the module that defines it.
_PUBLIC = {
    'TFLitePyPolicy': 'actor', 'StockPyPolicy': 'actor',
    'greedy_policy': 'actor', 'collect_policy': 'actor',
    'ExploringPyPolicy': 'exploration',
    'replay_observer': 'replay', 'replay_dataset': 'replay',
    'Refusals': 'replay',
    'create_export_trigger': 'learner', 'ExportTrigger': 'learner',
    'export_policy': 'learner',
    'ModelPublisher': 'model_channel', 'ModelPuller': 'model_channel',
    'create_tables': 'server', 'start_server': 'server',
    'run_key': 'signing', 'RunKey': 'signing',
}
__all__ = ['PRECISIONS', 'TFLITE_PRECISIONS', *_PUBLIC]


def __getattr__(name):
  if name not in _PUBLIC:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return getattr(importlib.import_module(f'{__name__}.{_PUBLIC[name]}'), name)
