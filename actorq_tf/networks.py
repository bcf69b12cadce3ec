"""Networks built from Keras layers, so the exporter can trace them.

The policy network is what actors run: a Q-network (observation ->
Q-values) for discrete actions, a deterministic actor network (observation
-> action) for continuous ones. The D4PG critic stays in the learner.
"""
from typing import Sequence

import gin
import numpy as np
import tensorflow as tf
from tf_agents.environments import py_environment
from tf_agents.networks import network
from tf_agents.networks import sequential
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
  q_network = sequential.Sequential(layers, input_spec=observation_spec)
  q_network.create_variables(observation_spec)
  return q_network


@gin.configurable
def create_actor_network(observation_spec: tensor_spec.TensorSpec,
                         action_spec: tensor_spec.BoundedTensorSpec,
                         fc_layer_params: Sequence[int] = (256, 256)
                        ) -> sequential.Sequential:
  """MLP observation -> action, squashed by tanh into the action bounds.

  ActorQ's Control Suite policies are 2048x2048x2048: bind
  `create_actor_network.fc_layer_params = (2048, 2048, 2048)`.
  """
  minimum = np.broadcast_to(action_spec.minimum, action_spec.shape)
  maximum = np.broadcast_to(action_spec.maximum, action_spec.shape)
  layers = [tf.keras.layers.Flatten()]
  layers += [tf.keras.layers.Dense(units, activation='relu')
             for units in fc_layer_params]
  layers += [
      tf.keras.layers.Dense(
          action_spec.shape[0], activation='tanh',
          kernel_initializer=tf.keras.initializers.RandomUniform(-3e-3, 3e-3)),
      tf.keras.layers.Rescaling(
          scale=((maximum - minimum) / 2).astype(np.float32).tolist(),
          offset=((maximum + minimum) / 2).astype(np.float32).tolist()),
  ]
  actor_network = sequential.Sequential(layers, input_spec=observation_spec)
  actor_network.create_variables(observation_spec)
  return actor_network


@gin.configurable
class DistributionalCriticNetwork(network.Network):
  """(observation, action) -> logits over the value atoms of D4PG.

  Args:
    input_tensor_spec: (observation spec, action spec).
    num_atoms: size of the categorical value distribution.
    fc_layer_params: hidden layer sizes. ActorQ's Control Suite critics are
      512x512x256 with layer norm: bind `DistributionalCriticNetwork.
      fc_layer_params = (512, 512, 256)` and `.layer_norm = True`.
    layer_norm: as Acme's LayerNormMLP, the first hidden layer is
      normalized and squashed with tanh, the others use ELU.
  """

  def __init__(self, input_tensor_spec, num_atoms: int = 51,
               fc_layer_params: Sequence[int] = (256, 256),
               layer_norm: bool = False, name='DistributionalCritic'):
    super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(),
                     name=name)
    self._hidden = []
    for index, units in enumerate(fc_layer_params):
      if layer_norm and index == 0:
        self._hidden += [tf.keras.layers.Dense(units),
                         tf.keras.layers.LayerNormalization(),
                         tf.keras.layers.Activation('tanh')]
      else:
        self._hidden.append(tf.keras.layers.Dense(
            units, activation='elu' if layer_norm else 'relu'))
    self._logits = tf.keras.layers.Dense(
        num_atoms,
        kernel_initializer=tf.keras.initializers.RandomUniform(-3e-3, 3e-3))

  def call(self, inputs, step_type=(), network_state=(), training=False):
    del step_type  # The critic has no state.
    observation, action = inputs
    batch_dims = tf.shape(action)[:-1]
    features = tf.concat([
        tf.reshape(observation, tf.concat([batch_dims, [-1]], 0)),
        tf.cast(action, observation.dtype)], axis=-1)
    for layer in self._hidden:
      features = layer(features, training=training)
    return self._logits(features), network_state


def policy_network_for(env: py_environment.PyEnvironment
                      ) -> sequential.Sequential:
  """The configured policy network for the environment's kind of actions."""
  observation_spec = tensor_spec.from_spec(env.observation_spec())
  if environments.is_discrete(env):
    return create_q_network(observation_spec,
                            environments.check_discrete_actions(env))
  environments.check_continuous_actions(env)
  return create_actor_network(observation_spec,
                              tensor_spec.from_spec(env.action_spec()))
