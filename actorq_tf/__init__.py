"""ActorQ-TF: distributed TF-Agents RL whose actors run int8 TFLite policies."""
import os
import warnings

# TensorFlow prints pages of C++ start-up logs per process; keep warnings and
# errors, drop the info lines. A user's own setting wins.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# tf.keras is Keras 2 from the tf_keras package, for TF-Agents and for
# tensorflow-model-optimization alike (tfmot's wrappers accept only tf_keras
# layers). TensorFlow reads this when tf.keras is first touched.
os.environ['TF_USE_LEGACY_KERAS'] = '1'

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

PRECISIONS = ('int8', 'fp16', 'fp32', 'tf')
TFLITE_PRECISIONS = ('int8', 'fp16', 'fp32')
