"""ActorQ-TF: TF-Agents reinforcement learning with int8 TFLite actors."""
import os

import setuptools

HERE = os.path.dirname(os.path.abspath(__file__))


def _requirements():
  with open(os.path.join(HERE, 'requirements.txt')) as f:
    return [line.split('#')[0].strip() for line in f
            if line.split('#')[0].strip()]


BINARIES = ('reverb_server_main', 'learner_main', 'actor_main', 'eval_main',
            'local_main', 'ray_main')

setuptools.setup(
    name='actorq-tf',
    version='0.1.0',
    description='Distributed TF-Agents RL whose actors run int8 TFLite '
                'policies (ActorQ).',
    packages=['actorq_tf', 'binaries'],
    python_requires='>=3.11,<3.12',
    install_requires=_requirements(),
    entry_points={'console_scripts': [
        f'{name} = binaries.{name}:run' for name in BINARIES]},
)
