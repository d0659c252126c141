from fastppo.policies.actor_critic import ActorCritic

__all__ = ["ActorCritic"]
