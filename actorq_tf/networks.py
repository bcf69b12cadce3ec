"""Q-networks built from Keras layers, so the exporter can trace them."""
from typing import Sequence

import gin
import tensorflow as tf
from tf_agents.networks import sequential
from tf_agents.environments import py_environment
from tf_agents.specs import tensor_spec

from actorq_tf import environments


@gin.configurable
def create_q_network(observation_spec: tensor_spec.TensorSpec,
                     num_actions: int,
                     fc_layer_params: Sequence[int] = (256, 256)
                    ) -> sequential.Sequential:
  """MLP observation -> Q-values with one output per action.

  A `sequential.Sequential` of plain Keras layers: TF-Agents trains it, and
  the exporter converts it to TFLite without the policy's sampling graph.
  """
  layers = [tf.keras.layers.Flatten()]
  layers += [tf.keras.layers.Dense(units, activation='relu')
             for units in fc_layer_params]
  layers.append(tf.keras.layers.Dense(
      num_actions,
      kernel_initializer=tf.keras.initializers.RandomUniform(-0.03, 0.03),
      bias_initializer=tf.keras.initializers.Constant(-0.2)))
  network = sequential.Sequential(layers, input_spec=observation_spec)
  network.create_variables(observation_spec)
  return network


def q_network_for(env: py_environment.PyEnvironment) -> sequential.Sequential:
  """The configured Q-network for a discrete-action environment."""
  num_actions = environments.check_discrete_actions(env)
  return create_q_network(tensor_spec.from_spec(env.observation_spec()),
                          num_actions)
