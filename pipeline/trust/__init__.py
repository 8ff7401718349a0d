"""Confidence: evidence classes, calibration tables, their fit, rules no table overrides, `idflow calibrate`."""
