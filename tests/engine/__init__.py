"""Tests of the engine: the hit and miss paths, flights, guard, leases, audit, modes, warm, memo."""
