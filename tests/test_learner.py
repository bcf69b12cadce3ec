"""The learner in-process against a real Reverb server fed by an actor."""
import os

import numpy as np
import reverb
import tensorflow as tf

from actorq_tf import actor
from actorq_tf import agents
from actorq_tf import energy
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import learner
from actorq_tf import model_channel
from actorq_tf import run_directory
from actorq_tf import signing


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
  model = model_channel.ModelPuller(
      client, 'int8', signing.run_key(root_dir)).pull_newer()
  assert model.version in (100, 200, 300)
  assert os.path.exists(os.path.join(root_dir, 'models', 'policy_int8.tflite'))
  assert os.listdir(os.path.join(root_dir, 'learner'))  # TensorBoard
  status = run_directory.read_status(root_dir, 'learner')
  assert status.train_step == 300 and status.stopped
  assert model.version in status.published_versions
  # No actor ran after the export at step 100: the next two had no fresh
  # observations to calibrate on (or found the first still converting),
  # and say so.
  assert status.skipped_exports == 2
  assert status.last_skipped_export in (
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
  assert status.energy_kwh > 0 and status.emissions_kg > 0
  assert 'CPU:' in status.energy_method
  update_bytes = status.model_update_bytes
  assert set(update_bytes) == {'int8', 'fp16', 'tf'}
  assert update_bytes['int8'] < update_bytes['fp16'] < update_bytes['tf']


def test_a_version_is_in_the_status_at_once_with_the_other_figures(
    reverb_server, tmp_path):
  # The exporter's thread lists a version before its rows go out, between
  # the train loop's writes: a learner killed then leaves no actor running
  # a version that its status does not list.
  trigger = learner.StatusTrigger(
      str(tmp_path), reverb.Client(reverb_server), 100,
      lambda step: {'train_step': step, 'published_versions': []}, 0)
  trigger(100, 0.5)
  trigger.amend(published_versions=[100])
  status = run_directory.read_status(str(tmp_path), 'learner')
  assert status.published_versions == [100]
  assert status.train_step == 100 and status.loss == 0.5
  trigger.write(stopped=True, train_step=150, published_versions=[100])
  trigger.amend(published_versions=[100, 200])  # too late: stopped
  assert run_directory.read_status(
      str(tmp_path), 'learner').published_versions == [100]


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


def test_a_run_exports_and_restores_its_policy_average(reverb_server,
                                                        tmp_path):
  root_dir = str(tmp_path)
  actor.run_actor(root_dir, reverb_server, max_env_steps=600)
  learner.train(root_dir, reverb_server, max_train_steps=100,
                export_interval=100, checkpoint_interval=100,
                policy_average_decay=0.99)
  kept = export.kept_network_weights(
      os.path.join(root_dir, 'models', 'policy_int8'))
  _, restored, step = learner.restore_policy_network(root_dir)
  assert step == 100
  for kept_weights, restored_weights in zip(kept, restored.get_weights()):
    np.testing.assert_array_equal(kept_weights, restored_weights)
  # The newest weights of the same checkpoint are another network.
  env = environments.load_environment()
  agent, newest = agents.builder().create_agent(
      env, tf.Variable(0, dtype=tf.int64))
  tf.train.Checkpoint(agent=agent).restore(
      tf.train.latest_checkpoint(os.path.join(root_dir, 'checkpoints'))
  ).expect_partial()
  assert not all(np.allclose(a, b) for a, b in
                 zip(newest.get_weights(), restored.get_weights()))


def test_the_policy_average_starts_as_the_network_then_moves_by_its_decay(
    cartpole_gin, tmp_path):
  del cartpole_gin
  env = environments.load_environment()
  _, network = agents.builder().create_agent(env,
                                             tf.Variable(0, dtype=tf.int64))
  start = network.get_weights()
  average = learner.PolicyAverage(network, decay=0.75)
  network.set_weights([w + 4.0 for w in start])
  average.update()  # the first update copies
  for averaged, weights in zip(average.get_weights(), start):
    np.testing.assert_allclose(averaged, weights + 4.0)
  network.set_weights([w + 8.0 for w in start])
  average.update()
  for averaged, weights in zip(average.get_weights(), start):
    np.testing.assert_allclose(averaged, weights + 5.0, atol=1e-5)
  # A restored average goes on from where it was, without copying again.
  saved = tf.train.Checkpoint(policy_average=average).save(
      str(tmp_path / 'average'))
  restored = learner.PolicyAverage(network, decay=0.75)
  tf.train.Checkpoint(policy_average=restored).restore(saved)
  restored.update()
  for averaged, weights in zip(restored.get_weights(), start):
    np.testing.assert_allclose(averaged, weights + 5.75, atol=1e-5)


def test_the_export_trigger_publishes_from_tf_agents_own_learner(
    reverb_server, tmp_path):
  from tf_agents.train import learner as tf_agents_learner  # pylint: disable=g-import-not-at-top
  from actorq_tf import replay  # pylint: disable=g-import-not-at-top
  root_dir = str(tmp_path)
  actor.run_actor(root_dir, reverb_server, max_env_steps=1000)
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  train_step = tf.Variable(0, dtype=tf.int64)
  agent, policy_network = algorithm.create_agent(env, train_step)
  key = signing.run_key(root_dir)
  trigger = learner.create_export_trigger(
      env, policy_network, reverb_server, key, str(tmp_path / 'models'),
      interval=100)
  refusals = replay.Refusals()

  def verified_batches():  # (experience, sample info), as Learner takes them
    return replay.replay_dataset(
        algorithm.collect_data_spec(env), algorithm.sequence_length(),
        reverb_server, 64, 5_000, key, refusals).filter(
            lambda steps, verified_items: verified_items > 0)

  stock_learner = tf_agents_learner.Learner(
      str(tmp_path / 'tf_agents_learner'), train_step, agent,
      verified_batches, triggers=[trigger])
  stock_learner.run(iterations=100)
  trigger.wait()
  # What an actor of the run pulls: the signed int8 model of step 100.
  policy = actor.TFLitePyPolicy(env, reverb_server, key)
  assert policy.update(wait=True) and policy.version == 100
  assert trigger.figures()['exports'] == 1
  assert refusals.figures()['replay_items_refused'] == 0


def test_export_policy_converts_checks_and_keeps_a_model_once(cartpole_gin,
                                                             tmp_path):
  del cartpole_gin  # the environment and network of dqn_cartpole.gin
  from actorq_tf.interpreter import TFLiteModel  # pylint: disable=g-import-not-at-top
  from helpers import cartpole_observations  # pylint: disable=g-import-not-at-top
  env = environments.load_environment()
  network = agents.check_environment(env).policy_network(env)
  observations = cartpole_observations()
  results = learner.export_policy(env, network, observations,
                                  precisions=('int8', 'fp32'),
                                  model_dir=str(tmp_path))
  assert [r.precision for r in results] == ['int8', 'fp32']
  assert all(r.check.passed for r in results), [r.check.reason
                                                for r in results]
  assert (tmp_path / 'policy_int8.tflite').exists()
  model = TFLiteModel(results[0].model_bytes, results[0].normalizer)
  assert model.greedy_actions(observations[:10]).shape == (10,)
