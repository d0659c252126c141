"""The Relay env (fake_pz_envs.py) as the multi-agent tests name it, and the tiny budget they train it with."""

RELAY = "pz:tests.support.fake_pz_envs"
TINY = dict(
    num_envs=2, num_steps=12, num_minibatches=2, update_epochs=2, total_timesteps=72, progress=False, tensorboard=False
)
