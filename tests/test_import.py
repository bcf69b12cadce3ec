"""`import actorq_tf` in a user's process: what it changes, and that a
user's own tf.keras models, built before and after it, still train and save
while ActorQ-TF's quantization-aware network builds beside them."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PROJECT_ROOT

_USERS_SCRIPT = textwrap.dedent('''
    import os, sys
    order = sys.argv[1]
    if order == 'actorq_tf first':
      import actorq_tf
    import numpy as np
    import tensorflow as tf

    def build_train_save(name):
      model = tf.keras.Sequential([
          tf.keras.layers.Dense(16, activation='relu', input_shape=(4,)),
          tf.keras.layers.Dense(1)])
      model.compile(tf.keras.optimizers.Adam(0.01), 'mse')
      x = np.random.default_rng(0).random((256, 4), dtype=np.float32)
      y = x.sum(1, keepdims=True)
      untrained = model.evaluate(x, y, verbose=0)
      model.fit(x, y, epochs=30, verbose=0)
      trained = model.evaluate(x, y, verbose=0)
      assert trained < untrained / 5, (name, untrained, trained)
      model.save(name + '.keras')
      loaded = tf.keras.models.load_model(name + '.keras')
      np.testing.assert_allclose(loaded.predict(x, verbose=0),
                                 model.predict(x, verbose=0), rtol=1e-5)
      tf.saved_model.save(model, name + '_saved_model')
      return model

    if order == 'user model first':
      before = build_train_save('before')
    if order != 'actorq_tf first':
      import actorq_tf
    from actorq_tf import learner, networks  # the modules that use Keras
    after = build_train_save('after')
    if order == 'user model first':
      before.fit(np.ones((8, 4), np.float32), np.ones((8, 1)), verbose=0)
      before.save('before_again.keras')
    from tf_agents.specs import tensor_spec
    q_network = networks.create_q_network(
        tensor_spec.TensorSpec([4], tf.float32), 2, quantization_aware=True,
        example_observations=lambda: np.random.rand(100, 4).astype(np.float32))
    q_network.create_variables()
    print('keras package:', type(after).__module__.split('.')[0],
          'TF_USE_LEGACY_KERAS:', os.environ.get('TF_USE_LEGACY_KERAS'))
''')


ORDERS = ('user model first', 'tensorflow first', 'actorq_tf first')


@pytest.fixture(scope='module')
def users_processes(request, tmp_path_factory):
  """One user's process per import order (each needs a fresh interpreter),
  started together: each is mostly one busy core for 15-40 s, so on two
  cores they finish in about the time of the slowest alone. Only the
  orders that this session runs are started."""
  wanted = [item.callspec.params['order'] for item in request.session.items
            if item.module is request.module and
            item.originalname == 'test_a_users_keras_models_train_and_save_'
            'around_the_import']
  environment = {name: value for name, value in os.environ.items()
                 if name != 'TF_USE_LEGACY_KERAS'}
  environment['PYTHONPATH'] = PROJECT_ROOT
  processes = {}
  try:
    for order in ORDERS:
      if order not in wanted:
        continue
      directory = tmp_path_factory.mktemp(order.replace(' ', '_'))
      # Files, not pipes: a pipe nobody reads yet would stall its process.
      with open(directory / 'stdout.txt', 'w') as stdout, \
          open(directory / 'stderr.txt', 'w') as stderr:
        processes[order] = (directory, subprocess.Popen(
            [sys.executable, '-c', _USERS_SCRIPT, order], cwd=directory,
            env=environment, stdout=stdout, stderr=stderr, text=True))
    yield processes
  finally:
    for _, process in processes.values():
      if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.parametrize('order', ORDERS)
def test_a_users_keras_models_train_and_save_around_the_import(
    users_processes, order):
  directory, process = users_processes[order]
  returncode = process.wait(timeout=300)
  stdout = (directory / 'stdout.txt').read_text()
  stderr = (directory / 'stderr.txt').read_text()
  assert returncode == 0, stderr[-3000:]
  # Imported after TensorFlow, it leaves tf.keras as TensorFlow made it;
  # imported first, it makes tf.keras tf_keras (README says so).
  expected = ('keras package: tf_keras TF_USE_LEGACY_KERAS: 1'
              if order == 'actorq_tf first' else
              'keras package: keras TF_USE_LEGACY_KERAS: 1')
  assert expected in stdout, stdout


def test_importing_the_package_imports_no_tensorflow():
  result = subprocess.run(
      [sys.executable, '-c', 'import sys, actorq_tf; '
       'print(sorted(m for m in ("tensorflow", "reverb", "tf_agents") '
       'if m in sys.modules), actorq_tf.TFLitePyPolicy.__module__)'],
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT), capture_output=True,
      text=True, timeout=300)
  assert result.stdout.split() == ['[]', 'actorq_tf.actor'], result.stderr
