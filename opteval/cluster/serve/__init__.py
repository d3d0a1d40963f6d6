"""Ray Serve: the model apps (simulated, vLLM through ray.serve.llm, stand-ins), their readiness
and teardown, the schedule's fleet, the per-backend deployers, and the rewards and critic services."""
