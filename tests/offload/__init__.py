"""Tests of the offload pools: thread, device and process."""
