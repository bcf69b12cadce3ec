"""The learner in-process against a real Reverb server fed by an actor."""
import os

import reverb
import tensorflow as tf

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import energy
from actorq_tf import environments
from actorq_tf import learner
from actorq_tf import model_channel
from actorq_tf import run_directory


def test_learner_trains_checkpoints_and_publishes_models(reverb_server,
                                                         tmp_path):
  root_dir = str(tmp_path)
  actor.run_actor(root_dir, reverb_server, max_env_steps=1000)
  step = learner.train(root_dir, reverb_server, max_train_steps=300,
                       export_interval=100, checkpoint_interval=1000)
  assert step == 300

  info = reverb.Client(reverb_server).server_info()
  assert info[model_channel.model_table_name('int8')].current_size == 1
  assert info[model_channel.model_table_name('fp32')].current_size == 0
  assert info[model_channel.VARIABLES_TABLE].current_size == 1
  client = model_channel.wait_for_server(reverb_server, 10)
  model = model_channel.ModelPuller(client, 'int8').pull_newer()
  assert model.version in (100, 200, 300)
  assert os.path.exists(os.path.join(root_dir, 'models', 'policy_int8.tflite'))
  assert os.listdir(os.path.join(root_dir, 'learner'))  # TensorBoard
  status = run_directory.read_status(root_dir, 'learner')
  assert status['train_step'] == 300 and status['stopped']
  # No actor ran after the export at step 100: the next two had no fresh
  # observations to calibrate on (or found the first still converting),
  # and say so.
  assert status['skipped_exports'] == 2
  assert status['last_skipped_export'] in (
      'step 300: 0 observations came from the actors since the last export',
      'step 300: the previous export is still running')

  # The same root_dir resumes from the final checkpoint, not from step 0.
  resumed = learner.train(root_dir, reverb_server, max_train_steps=350,
                          export_interval=100)
  assert resumed == 350


def test_learner_exports_the_actors_float_precision_too(reverb_server,
                                                        tmp_path):
  actor.run_actor(str(tmp_path), reverb_server, max_env_steps=600)
  learner.train(str(tmp_path), reverb_server, actor_precision='fp16',
                max_train_steps=100, export_interval=100,
                energy_meter=energy.EnergyMeter('USA').start())
  info = reverb.Client(reverb_server).server_info()
  assert info[model_channel.model_table_name('fp16')].current_size == 1
  assert info[model_channel.model_table_name('int8')].current_size == 1
  # A learner on its own measures its machine's energy; each actor
  # precision's update size is known.
  status = run_directory.read_status(str(tmp_path), 'learner')
  assert status['energy_kwh'] > 0 and status['emissions_kg'] > 0
  assert 'CPU:' in status['energy_method']
  update_bytes = status['model_update_bytes']
  assert set(update_bytes) == {'int8', 'fp16', 'tf'}
  assert update_bytes['int8'] < update_bytes['fp16'] < update_bytes['tf']


def test_dqn_optimizer_slots_exist_before_a_restore(cartpole_gin):
  # A checkpoint restores Adam's moments only into slots that exist; slots
  # made at the first train step after a resume would start from zero.
  del cartpole_gin
  env = environments.load_environment()
  agent, q_network = agents.builder().create_agent(
      env, tf.Variable(0, dtype=tf.int64))
  # pylint: disable-next=protected-access
  slots = agent._optimizer.variables
  # iterations, then two moments per trainable variable.
  assert len(slots) == 1 + 2 * len(q_network.trainable_variables)
