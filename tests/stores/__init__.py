"""Tests of the stores: one contract suite for all of them, then each store's own."""
