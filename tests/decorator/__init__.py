"""Tests of @cached_prediction: binding and methods, micro-batching, typed returns, typing."""
