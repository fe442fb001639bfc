"""Workloads: prompt sets, seeds and shapes."""
