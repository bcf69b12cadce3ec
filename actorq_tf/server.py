"""The Reverb server: the one place where actors and the learner meet."""
import reverb
import tensorflow as tf

from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import model_channel
from actorq_tf import networks
from actorq_tf import replay


def create_tables(env) -> list:
  """Replay, one newest-model table per TFLite precision, and variables."""
  q_network = networks.q_network_for(env)
  agent = agents.create_dqn_agent(env, q_network,
                                  tf.Variable(0, dtype=tf.int64))
  tables = [replay.replay_table(agent.collect_data_spec,
                                agent.train_sequence_length)]
  observation_shape = env.observation_spec().shape
  tables += [model_channel.model_table(p, observation_shape)
             for p in TFLITE_PRECISIONS]
  tables.append(model_channel.variables_table(
      model_channel.policy_variables(q_network.variables,
                                     tf.Variable(0, dtype=tf.int64))))
  return tables


def start_server(port: int) -> reverb.Server:
  env = environments.load_environment()
  return reverb.Server(create_tables(env), port=port)
