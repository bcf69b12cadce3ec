"""TF-Agents' distributed pattern (a Reverb server job, a collect job, a train
job) for DQN on CartPole, with int8 TFLite actors: the lines that differ
from a stock TF-Agents script are marked `# ActorQ`.

  python examples/tf_agents_dqn.py --job=reverb_server --root_dir=/tmp/dqn &
  python examples/tf_agents_dqn.py --job=train --root_dir=/tmp/dqn &
  python examples/tf_agents_dqn.py --job=collect --root_dir=/tmp/dqn

The collect job plays the newest int8 model the train job published, with
epsilon-greedy exploration around it. Models and replay items are signed
with the run key, `model.key` in root_dir, made by whichever job asks first.
"""
import os

from absl import app
from absl import flags
from absl import logging
import actorq_tf  # ActorQ
import reverb
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.environments import suite_gym
from tf_agents.networks import q_network
from tf_agents.train import actor
from tf_agents.train import learner
from tf_agents.train import triggers
from tf_agents.utils import common

flags.DEFINE_enum('job', None, ['reverb_server', 'collect', 'train'],
                  'Which job this process runs.')
flags.DEFINE_string('root_dir', None, 'Run directory, shared by the jobs.')
flags.DEFINE_integer('port', 8008, 'The Reverb server job\'s port.')
flags.DEFINE_string('replay_server_address', 'localhost:8008',
                    'host:port of the Reverb server job.')
flags.DEFINE_integer('num_iterations', 1000, 'Train steps of the train job.')
flags.DEFINE_integer('export_interval', 100,
                     'Train steps between int8 models.')
flags.DEFINE_integer('max_env_steps', 5000, 'Env steps of the collect job.')
FLAGS = flags.FLAGS


def environment():
  return suite_gym.load('CartPole-v1')


def create_network(env):
  return q_network.QNetwork(env.observation_spec(), env.action_spec(),
                            fc_layer_params=(64, 64))


def create_agent(env, train_step):
  network = create_network(env)
  agent = dqn_agent.DqnAgent(
      env.time_step_spec(), env.action_spec(), q_network=network,
      optimizer=tf.keras.optimizers.Adam(1e-3),
      td_errors_loss_fn=common.element_wise_huber_loss,
      target_update_period=100, train_step_counter=train_step)
  agent.initialize()
  return agent, network


def reverb_server_job(env):
  # ActorQ: replay (signed items), recent observations and model tables.
  server = actorq_tf.start_server(FLAGS.port, checkpoint_dir=None, env=env,
                                  policy_network=create_network(env))
  server.wait()


def collect_job(env, key):
  greedy = actorq_tf.TFLitePyPolicy(env, FLAGS.replay_server_address,
                                    key)  # ActorQ: int8 models, pulled
  collect_policy = actorq_tf.collect_policy(env, greedy)  # ActorQ
  replay_observer = actorq_tf.replay_observer(  # ActorQ: signed items
      reverb.Client(FLAGS.replay_server_address), key)
  collect_actor = actor.Actor(
      env, collect_policy, tf.Variable(0, dtype=tf.int64), steps_per_run=100,
      observers=[replay_observer], metrics=actor.collect_metrics(10),
      summary_dir=os.path.join(FLAGS.root_dir, learner.TRAIN_DIR, 'actor'))
  while collect_policy.steps < FLAGS.max_env_steps:
    collect_actor.run()
    greedy.update()  # ActorQ: a newer model, once it passed its check
    logging.info('env steps %d, model version %d, random steps %d, '
                 'return %.1f', collect_policy.steps, greedy.version,
                 collect_policy.steps_without_model,
                 collect_actor.metrics[0].result())
  replay_observer.close()
  print(f'collect: {collect_policy.steps} env steps, model version '
        f'{greedy.version}, {collect_policy.steps_without_model} without one')


def train_job(env, key):
  train_step = tf.Variable(0, dtype=tf.int64)
  agent, network = create_agent(env, train_step)
  refusals = actorq_tf.Refusals()

  def experience_dataset():  # ActorQ: only items the run key verifies
    return actorq_tf.replay_dataset(
        agent.collect_data_spec, agent.train_sequence_length,
        FLAGS.replay_server_address, batch_size=64,
        rate_limiter_timeout_ms=60_000, key=key, refusals=refusals
    ).filter(lambda experience, verified_items: verified_items > 0)

  export_trigger = actorq_tf.create_export_trigger(  # ActorQ
      env, network, FLAGS.replay_server_address, key,
      os.path.join(FLAGS.root_dir, 'models'), FLAGS.export_interval)
  agent_learner = learner.Learner(
      FLAGS.root_dir, train_step, agent, experience_dataset,
      triggers=[export_trigger, triggers.StepPerSecondLogTrigger(train_step,
                                                                 100)])
  while train_step < FLAGS.num_iterations:
    loss = agent_learner.run(iterations=100).loss
    logging.info('train step %d, loss %.3f', int(train_step), loss)
  export_trigger.wait()
  print(f'train: {int(train_step)} train steps, '
        f'{export_trigger.figures()["exports"]} int8 models exported, '
        f'{refusals.figures()["replay_items_refused"]} replay items refused')


def main(_):
  env = environment()
  if FLAGS.job == 'reverb_server':
    reverb_server_job(env)
    return
  key = actorq_tf.run_key(FLAGS.root_dir)  # ActorQ: signs models and replay
  if FLAGS.job == 'collect':
    collect_job(env, key)
  else:
    train_job(env, key)


if __name__ == '__main__':
  flags.mark_flags_as_required(['job', 'root_dir'])
  app.run(main)
