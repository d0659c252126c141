from fastppo.envs.make import make_single_env, make_vec_env
from fastppo.envs.vector import Episodes, StepResult, VecEnv

__all__ = ["Episodes", "make_single_env", "make_vec_env", "StepResult", "VecEnv"]
