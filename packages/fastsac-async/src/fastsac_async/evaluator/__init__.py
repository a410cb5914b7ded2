"""The evaluator: the deterministic policy of the latest published weights, on envs of its own."""
