"""Loading a model pair in the formats the calibration chose for this machine."""
