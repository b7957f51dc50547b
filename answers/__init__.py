"""Answers to the SELU problem as KernelBench takes them: each file defines ``ModelNew``."""
