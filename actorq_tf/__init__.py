"""ActorQ-TF: distributed TF-Agents RL whose actors run int8 TFLite policies."""
import os
import re
import sys
import threading
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

_DUPLICATE_REGISTRATION = re.compile(
    rb'Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register '
    rb'factory for plugin cu(DNN|FFT|BLAS) when one has already been '
    rb'registered')


def _import_tensorflow_without_its_registration_errors():
  """TensorFlow 2.15's wheels register the cuDNN, cuFFT and cuBLAS
  factories twice and log an ERROR line for each at import, with or without
  a GPU (tensorflow/tensorflow#62075): the first thing every command printed.
  Those three lines are dropped; everything else TensorFlow prints while it
  loads goes on to stderr as it comes, so a crash in the import keeps its
  message."""
  if 'tensorflow' in sys.modules:
    return
  sys.stderr.flush()
  read_end, write_end = os.pipe()
  stderr = os.dup(2)

  def forward():
    with os.fdopen(read_end, 'rb') as lines:
      for line in lines:
        if not _DUPLICATE_REGISTRATION.search(line):
          os.write(stderr, line)

  forwarder = threading.Thread(target=forward, daemon=True)
  forwarder.start()
  os.dup2(write_end, 2)
  os.close(write_end)
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    os.dup2(stderr, 2)  # The pipe's last write end closes: forward() ends.
    forwarder.join()
    os.close(stderr)


_import_tensorflow_without_its_registration_errors()

PRECISIONS = ('int8', 'fp16', 'fp32', 'tf')
TFLITE_PRECISIONS = ('int8', 'fp16', 'fp32')
