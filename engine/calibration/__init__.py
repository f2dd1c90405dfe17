"""Measuring what this machine runs fastest, once, and choosing the weight formats from the measurements."""
