"""Measuring: bench, profiler, calibration, rollouts, the scheduler simulator."""
